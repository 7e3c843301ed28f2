//! Code generation from a validated [`JobConfig`]: the function unchanged, plus one registry
//! entry in `simba::job::SCHEDULED_JOBS` or `PARTITIONED_JOBS`. The generated code names only
//! public registry types and the `#[doc(hidden)]` `simba::__private` support module, through
//! the crate path of the configuration (`::simba` unless `crate = "..."` says otherwise).

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType};

use crate::args::{JobConfig, JobKind, Misfire, Schedule};

/// The function followed by its registry entry.
pub(crate) fn expand(func: &ItemFn, config: &JobConfig) -> TokenStream {
    let entry = registry_entry(func, config);
    let policy = policy_tokens(config);
    // A `#[cfg]` below the macro's attribute removes the function; the entry goes with it.
    let cfgs = func.attrs.iter().filter(|a| a.path().is_ident("cfg"));
    let cfgs2 = func.attrs.iter().filter(|a| a.path().is_ident("cfg"));
    quote! {
        #func
        #(#cfgs)*
        #entry
        #(#cfgs2)*
        #policy
    }
}

/// The pieces of the generated call of the user's function, with the spans that point type
/// errors at the user's code.
struct Call {
    /// `&term`, at the span of the first parameter's type.
    term: TokenStream,
    /// `, &ctx` when the function takes the run context, at its type's span.
    ctx_arg: TokenStream,
    /// The `let ctx = ...;` before the call, when it takes one.
    ctx_let: TokenStream,
    /// The crate path, at the span of the return type.
    krate_out: TokenStream,
    /// The span of the return type (or the function's name).
    output_span: proc_macro2::Span,
}

fn call_parts(func: &ItemFn, config: &JobConfig) -> Call {
    let ident = &func.sig.ident;
    let krate = &config.krate;
    // Type errors in the call point at the user's code: a first parameter that is not `&Term`
    // at its type, a return type that is not `()` or a `Result` (or a future that is not
    // `Send`) at the return type.
    let term_span = match func.sig.inputs.first() {
        Some(FnArg::Typed(param)) => param.ty.span(),
        _ => ident.span(),
    };
    let term = quote_spanned!(term_span=> &term);
    // The run context, when the function takes it, at the span of its type.
    let ctx_span = match func.sig.inputs.last() {
        Some(FnArg::Typed(param)) if config.context => param.ty.span(),
        _ => ident.span(),
    };
    let ctx_arg = if config.context { quote_spanned!(ctx_span=> , &ctx) } else { quote!() };
    let ctx_let = if config.context { quote!(let ctx = #krate::__private::job_context();) } else { quote!() };
    let output_span = match &func.sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => ident.span(),
    };
    // The crate path inside the call carries the output's span too, so that a future that is
    // not `Send` or a wrong return type is reported at the function, not at the attribute.
    let krate_out = respan(quote!(#krate), output_span);
    Call { term, ctx_arg, ctx_let, krate_out, output_span }
}

/// The job's static in `SCHEDULED_JOBS` or `PARTITIONED_JOBS`.
fn registry_entry(func: &ItemFn, config: &JobConfig) -> TokenStream {
    let ident = &func.sig.ident;
    let name = &config.name;
    let krate = &config.krate;
    let misfire = misfire_tokens(krate, config.misfire);
    let Call { term, ctx_arg, ctx_let, krate_out, output_span } = call_parts(func, config);
    match &config.job {
        JobKind::Scheduled { lease, schedule } => {
            let schedule = schedule_tokens(krate, schedule);
            let call = quote_spanned! {output_span=>
                #krate_out::__private::job_future(async move { #ctx_let #ident(#term #ctx_arg).await })
            };
            let run = quote!(|term| #call);
            let static_ident = format_ident!("__SIMBA_SCHEDULED_{}", name.to_uppercase());
            quote! {
                #[#krate::__private::linkme::distributed_slice(#krate::job::SCHEDULED_JOBS)]
                #[linkme(crate = #krate::__private::linkme)]
                #[doc(hidden)]
                #[allow(non_upper_case_globals)]
                static #static_ident: #krate::job::ScheduledJob = #krate::job::ScheduledJob {
                    name: #name,
                    lease: #lease,
                    schedule: #schedule,
                    misfire: #misfire,
                    run: #run,
                };
            }
        }
        JobKind::Partitioned { group, partitions, schedule } => {
            let schedule = match schedule {
                Some(schedule) => {
                    let schedule = schedule_tokens(krate, schedule);
                    quote!(::core::option::Option::Some(#schedule))
                }
                None => quote!(::core::option::Option::None),
            };
            let call = quote_spanned! {output_span=>
                #krate_out::__private::job_future(async move { #ctx_let #ident(#term, partition #ctx_arg).await })
            };
            let run = quote!(|term, partition| #call);
            let static_ident = format_ident!("__SIMBA_PARTITIONED_{}", name.to_uppercase());
            quote! {
                #[#krate::__private::linkme::distributed_slice(#krate::job::PARTITIONED_JOBS)]
                #[linkme(crate = #krate::__private::linkme)]
                #[doc(hidden)]
                #[allow(non_upper_case_globals)]
                static #static_ident: #krate::job::PartitionedJob = #krate::job::PartitionedJob {
                    name: #name,
                    group: #group,
                    partitions: #partitions,
                    schedule: #schedule,
                    misfire: #misfire,
                    run: #run,
                };
            }
        }
    }
}

/// The job's `retry`/`backoff`/`timeout` entry in `simba::job::JOB_POLICIES`, when set.
fn policy_tokens(config: &JobConfig) -> TokenStream {
    if config.retry.is_none() && config.backoff.is_none() && config.timeout.is_none() {
        return quote!();
    }
    let name = &config.name;
    let retry = config.retry.unwrap_or(0);
    let dur = |d: Option<std::time::Duration>| match d {
        Some(d) => {
            let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
            quote!(::core::option::Option::Some(::core::time::Duration::new(#secs, #nanos)))
        }
        None => quote!(::core::option::Option::None),
    };
    let (backoff, timeout) = (dur(config.backoff), dur(config.timeout));
    let static_ident = format_ident!("__SIMBA_POLICY_{}", name.to_uppercase());
    let krate = &config.krate;
    quote! {
        #[#krate::__private::linkme::distributed_slice(#krate::job::JOB_POLICIES)]
        #[linkme(crate = #krate::__private::linkme)]
        #[doc(hidden)]
        #[allow(non_upper_case_globals)]
        static #static_ident: #krate::job::JobPolicy = #krate::job::JobPolicy {
            name: #name,
            retry: #retry,
            backoff: #backoff,
            timeout: #timeout,
        };
    }
}

fn schedule_tokens(krate: &syn::Path, schedule: &Schedule) -> TokenStream {
    match schedule {
        // The runtime's one schedule type, built by its `const` constructors (its text is a
        // `Cow<'static, str>`, borrowed here).
        Schedule::Cron { expr, time_zone: Some(zone) } => quote! {
            #krate::job::Schedule::cron_in(#expr, #zone)
        },
        Schedule::Cron { expr, time_zone: None } => quote! {
            #krate::job::Schedule::cron(#expr)
        },
        Schedule::FixedRate(period) => {
            let secs = period.as_secs();
            let nanos = period.subsec_nanos();
            quote! {
                #krate::job::Schedule::FixedRate(::core::time::Duration::new(#secs, #nanos))
            }
        }
    }
}

fn misfire_tokens(krate: &syn::Path, misfire: Misfire) -> TokenStream {
    match misfire {
        Misfire::Skip => quote!(#krate::job::Misfire::Skip),
        Misfire::RunOnce => quote!(#krate::job::Misfire::RunOnce),
    }
}

/// `tokens` with every token at `span`.
fn respan(tokens: TokenStream, span: proc_macro2::Span) -> TokenStream {
    tokens
        .into_iter()
        .map(|mut t| {
            t.set_span(span);
            t
        })
        .collect()
}
