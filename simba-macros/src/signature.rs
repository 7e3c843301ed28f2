//! The checks of the annotated function's signature: `async fn NAME(term: &Term) -> R` for a
//! scheduled job, `async fn NAME(term: &Term, partition: u32) -> R` for a partitioned one,
//! `async fn NAME(term: &Term, payload: T) -> R` for a handler (`T` deserialised from the
//! schedule's JSON payload), each optionally followed by the run context (`ctx: &JobContext`) and the application's
//! state (`State<T>` parameters), in any order.
//! What the macro cannot see (that `&Term` really is `simba::Term`, that `R` is `()` or a
//! `Result`, that the future is `Send`) the compiler checks on the generated call, whose
//! tokens carry the spans of the parameter and return types.

use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, Type};

use crate::kind::Kind;

/// Checks the function's signature: `async fn NAME(term: &Term) -> R` for a scheduled job,
/// `async fn NAME(term: &Term, partition: u32) -> R` for a partitioned one.
pub(crate) fn check(kind: Kind, func: &ItemFn) -> syn::Result<()> {
    let expected = match kind {
        Kind::Scheduled => "`async fn name(term: &Term) -> R`",
        Kind::Partitioned => "`async fn name(term: &Term, partition: u32) -> R`",
        Kind::Handler => "`async fn name(term: &Term, payload: T) -> R`",
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

/// What a job takes after the term (and a partitioned job's index), in the order written.
#[derive(Debug, Clone)]
pub(crate) enum Extra {
    /// The run context, `ctx: &JobContext`, passed at the span of its type.
    Context(proc_macro2::Span),
    /// The application's state, `State<T>` (its full type as written), from the runtime's
    /// `state(..)`.
    State(Box<Type>),
}

/// The parameters: no `self`; the term by shared reference; a partitioned job's `u32` index;
/// then the run context by shared reference (at most once) and `State<T>` parameters, in any
/// order.
fn check_params(kind: Kind, sig: &syn::Signature, expected: &str) -> syn::Result<()> {
    let params: Vec<&FnArg> = sig.inputs.iter().collect();
    if let Some(FnArg::Receiver(receiver)) = params.first() {
        return Err(syn::Error::new(
            receiver.span(),
            format!("a job cannot take `self`: write a free function, {expected}"),
        ));
    }
    let wanted = required(kind);
    if params.len() < wanted {
        return Err(syn::Error::new(
            sig.paren_token.span.join(),
            format!(
                "{} takes {wanted} parameter{} first, then optionally the run context (`ctx: &JobContext`) and \
                 application state (`State<T>`), found {}: write {expected}",
                if kind == Kind::Handler { "a handler" } else { "a job" },
                plural(wanted),
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
        check_term(&term.ty)?;
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
    if kind == Kind::Handler
        && let Some(payload) = typed.get(1)
    {
        check_payload(&payload.ty)?;
    }
    extras_of(&typed[wanted.min(typed.len())..]).map(|_| ())
}

fn check_term(ty: &Type) -> syn::Result<()> {
    match ty {
        Type::Reference(r) if r.mutability.is_none() => Ok(()),
        Type::Reference(r) => Err(syn::Error::new(
            r.mutability.span(),
            "the first parameter must be a shared reference, `term: &Term`, not `&mut`",
        )),
        other => Err(syn::Error::new(
            other.span(),
            "the first parameter must be the term the job runs under, by reference: `term: &Term`",
        )),
    }
}

/// A handler's payload: an owned value the schedule's JSON deserialises into (the compiler
/// checks `serde::de::DeserializeOwned` on the generated call), not a reference, the run
/// context or the application's state (those come after it).
fn check_payload(ty: &Type) -> syn::Result<()> {
    let what = if matches!(ty, Type::Reference(_)) || last_ident(ty).is_some_and(|i| i == "JobContext") {
        "a reference"
    } else if is_state(ty) {
        "`State<T>`"
    } else {
        return Ok(());
    };
    Err(syn::Error::new(
        ty.span(),
        format!(
            "the second parameter is the schedule's payload, an owned type deserialised from its JSON \
             (`payload: Report` with `#[derive(serde::Deserialize)]`, or `serde_json::Value`), not {what}; the run \
             context and `State<T>` come after it"
        ),
    ))
}

/// How many parameters come first: the term, and a partitioned job's index or a handler's
/// payload.
fn required(kind: Kind) -> usize {
    match kind {
        Kind::Scheduled => 1,
        Kind::Partitioned | Kind::Handler => 2,
    }
}

/// A handler's payload type: its second parameter's (checked by [`check`] first).
pub(crate) fn payload(func: &ItemFn) -> Option<&Type> {
    func.sig
        .inputs
        .iter()
        .filter_map(|p| match p {
            FnArg::Typed(t) => Some(&*t.ty),
            FnArg::Receiver(_) => None,
        })
        .nth(1)
}

/// The parameters after the required ones: each the run context (a shared reference, once)
/// or `State<T>`; anything else is an error at its type naming the accepted forms.
fn extras_of(params: &[&syn::PatType]) -> syn::Result<Vec<Extra>> {
    let mut extras = Vec::new();
    for p in params {
        let ty = &*p.ty;
        match ty {
            Type::Reference(r) if r.mutability.is_none() => {
                if extras.iter().any(|e| matches!(e, Extra::Context(_))) {
                    return Err(syn::Error::new(ty.span(), "a job takes the run context once: `ctx: &JobContext`"));
                }
                extras.push(Extra::Context(ty.span()));
            }
            _ if is_state(ty) => extras.push(Extra::State(Box::new(ty.clone()))),
            _ if last_ident(ty).is_some_and(|i| i == "JobContext") => {
                return Err(syn::Error::new(
                    ty.span(),
                    "the run context is taken by shared reference: `ctx: &JobContext`",
                ));
            }
            _ => {
                return Err(syn::Error::new(
                    ty.span(),
                    "after the term (and a partition's index) a job takes only the run context, `ctx: &JobContext`, \
                     and the application's state, `State<T>` (with `Runtime::builder().state(value)`)",
                ));
            }
        }
    }
    Ok(extras)
}

/// What the function takes after the term (and the partition), checked by [`check`] first.
pub(crate) fn extras(kind: Kind, func: &ItemFn) -> Vec<Extra> {
    let typed: Vec<&syn::PatType> = func
        .sig
        .inputs
        .iter()
        .filter_map(|p| match p {
            FnArg::Typed(t) => Some(t),
            FnArg::Receiver(_) => None,
        })
        .collect();
    let wanted = required(kind).min(typed.len());
    extras_of(&typed[wanted..]).unwrap_or_default()
}

/// Whether `ty` is `State<T>` (any path ending in `State` with one type argument).
fn is_state(ty: &Type) -> bool {
    match ty {
        Type::Path(p) => {
            p.qself.is_none()
                && p.path.segments.last().is_some_and(|s| {
                    s.ident == "State"
                        && matches!(&s.arguments, syn::PathArguments::AngleBracketed(a)
                        if a.args.len() == 1 && matches!(a.args.first(), Some(syn::GenericArgument::Type(_))))
                })
        }
        Type::Paren(p) => is_state(&p.elem),
        Type::Group(g) => is_state(&g.elem),
        _ => false,
    }
}

fn last_ident(ty: &Type) -> Option<&syn::Ident> {
    match ty {
        Type::Path(p) => p.path.segments.last().map(|s| &s.ident),
        _ => None,
    }
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
