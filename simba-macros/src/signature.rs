//! The checks of the annotated function's signature: `async fn NAME(term: &Term) -> R` for a
//! scheduled job, `async fn NAME(term: &Term, partition: u32) -> R` for a partitioned one.
//! What the macro cannot see (that `&Term` really is `simba::Term`, that `R` is `()` or a
//! `Result`, that the future is `Send`) the compiler checks on the generated call, whose
//! tokens carry the spans of the parameter and return types.

use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Type};

use crate::args::Kind;

/// Checks the function's signature: `async fn NAME(term: &Term) -> R` for a scheduled job,
/// `async fn NAME(term: &Term, partition: u32) -> R` for a partitioned one.
pub(crate) fn check(kind: Kind, func: &ItemFn) -> syn::Result<()> {
    let expected = match kind {
        Kind::Scheduled => "`async fn name(term: &Term) -> R`",
        Kind::Partitioned => "`async fn name(term: &Term, partition: u32) -> R`",
    };
    check_header(&func.sig, expected)?;
    check_params(kind, &func.sig, expected)
}

/// Everything but the parameters: `async`, not `unsafe`, no ABI, not generic, not variadic.
fn check_header(sig: &syn::Signature, expected: &str) -> syn::Result<()> {
    if sig.asyncness.is_none() {
        return Err(syn::Error::new(
            sig.fn_token.span,
            format!("the `async` keyword is missing: a job is {expected}, with R `()` or a `Result`"),
        ));
    }
    if let Some(unsafety) = &sig.unsafety {
        return Err(syn::Error::new(unsafety.span, "a job function cannot be `unsafe`"));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new(abi.span(), "a job function cannot have an `extern` ABI"));
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            sig.generics.span(),
            format!("a job function cannot be generic: the runtime calls it as {expected}"),
        ));
    }
    if let Some(variadic) = &sig.variadic {
        return Err(syn::Error::new(variadic.span(), format!("a job function is {expected}")));
    }
    Ok(())
}

/// The parameters: no `self`; the term by shared reference; a partitioned job's `u32` index;
/// the optional run context last, by shared reference.
fn check_params(kind: Kind, sig: &syn::Signature, expected: &str) -> syn::Result<()> {
    let params: Vec<&FnArg> = sig.inputs.iter().collect();
    if let Some(FnArg::Receiver(receiver)) = params.first() {
        return Err(syn::Error::new(
            receiver.span(),
            format!("a job cannot take `self`: write a free function, {expected}"),
        ));
    }
    let wanted = match kind {
        Kind::Scheduled => 1,
        Kind::Partitioned => 2,
    };
    if params.len() != wanted && params.len() != wanted + 1 {
        return Err(syn::Error::new(
            sig.paren_token.span.join(),
            format!(
                "a job takes {wanted} parameter{}, or {} with the run context last (`ctx: &JobContext`), found {}: write {expected}",
                plural(wanted),
                wanted + 1,
                params.len()
            ),
        ));
    }
    let typed: Vec<&syn::PatType> = params
        .iter()
        .filter_map(|p| match p {
            FnArg::Typed(t) => Some(t),
            FnArg::Receiver(_) => None,
        })
        .collect();
    if let Some(term) = typed.first() {
        match &*term.ty {
            Type::Reference(r) if r.mutability.is_none() => {}
            Type::Reference(r) => {
                return Err(syn::Error::new(
                    r.mutability.span(),
                    "the first parameter must be a shared reference, `term: &Term`, not `&mut`",
                ));
            }
            other => {
                return Err(syn::Error::new(
                    other.span(),
                    "the first parameter must be the term the job runs under, by reference: `term: &Term`",
                ));
            }
        }
    }
    if kind == Kind::Partitioned
        && let Some(partition) = typed.get(1)
        && !is_u32(&partition.ty)
    {
        return Err(syn::Error::new(
            partition.ty.span(),
            "the second parameter is the partition's index and must be `u32`: `partition: u32`",
        ));
    }
    if params.len() == wanted + 1
        && let Some(ctx) = typed.last()
        && !matches!(&*ctx.ty, Type::Reference(r) if r.mutability.is_none())
    {
        return Err(syn::Error::new(
            ctx.ty.span(),
            "the last parameter is the run context, by shared reference: `ctx: &JobContext`",
        ));
    }
    Ok(())
}

/// Whether the function takes the run context as an extra last parameter.
pub(crate) fn takes_context(kind: Kind, func: &ItemFn) -> bool {
    let wanted = match kind {
        Kind::Scheduled => 1,
        Kind::Partitioned => 2,
    };
    func.sig.inputs.len() == wanted + 1
}

fn is_u32(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => {
            p.qself.is_none()
                && p.path.segments.last().is_some_and(|s| s.ident == "u32" && s.arguments.is_none())
                && (p.path.segments.len() == 1 || {
                    // `core::primitive::u32` / `std::primitive::u32`
                    let names: Vec<String> = p.path.segments.iter().map(|s| s.ident.to_string()).collect();
                    names.len() == 3 && (names[0] == "core" || names[0] == "std") && names[1] == "primitive"
                })
        }
        Type::Paren(p) => is_u32(&p.elem),
        Type::Group(g) => is_u32(&g.elem),
        _ => false,
    }
}

fn plural(n: usize) -> &'static str {
    if n == 1 { "" } else { "s" }
}
