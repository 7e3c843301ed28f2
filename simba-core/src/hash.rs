//! The one hash the core places things with (schedule ids on partitions, start jitter).

/// The 64-bit FNV-1a hash of `bytes`: simple, fast on short keys, and the same on every
/// platform and in every language, so a tool outside Rust can place an id too.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    bytes.iter().fold(OFFSET, |h, b| (h ^ u64::from(*b)).wrapping_mul(PRIME))
}
