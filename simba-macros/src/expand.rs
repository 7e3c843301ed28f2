//! Code generation from a validated [`JobConfig`]: the function unchanged, plus one registry
//! entry in `simba::job::SCHEDULED_JOBS` or `PARTITIONED_JOBS`. The generated code names only
//! public registry types and the `#[doc(hidden)]` `simba::__private` support module.

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType};

use crate::args::{JobConfig, JobKind, Misfire, Schedule};

/// The function followed by its registry entry.
pub(crate) fn expand(func: &ItemFn, config: &JobConfig) -> TokenStream {
    let ident = &func.sig.ident;
    let name = &config.name;
    let misfire = misfire_tokens(config.misfire);
    // Type errors in the call point at the user's code: a first parameter that is not `&Term`
    // at its type, a return type that is not `()` or a `Result` (or a future that is not
    // `Send`) at the return type.
    let term_span = match func.sig.inputs.first() {
        Some(FnArg::Typed(param)) => param.ty.span(),
        _ => ident.span(),
    };
    let term = quote_spanned!(term_span=> &term);
    let output_span = match &func.sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => ident.span(),
    };
    // A `#[cfg]` below the macro's attribute removes the function; the entry goes with it.
    let cfgs = func.attrs.iter().filter(|a| a.path().is_ident("cfg"));
    let entry = match &config.job {
        JobKind::Scheduled { lease, schedule } => {
            let schedule = schedule_tokens(schedule);
            let call = quote_spanned! {output_span=>
                ::simba::__private::job_future(async move { #ident(#term).await })
            };
            let run = quote!(|term| #call);
            let static_ident = format_ident!("__SIMBA_SCHEDULED_{}", name.to_uppercase());
            quote! {
                #[::simba::__private::linkme::distributed_slice(::simba::job::SCHEDULED_JOBS)]
                #[linkme(crate = ::simba::__private::linkme)]
                #[doc(hidden)]
                #[allow(non_upper_case_globals)]
                static #static_ident: ::simba::job::ScheduledJob = ::simba::job::ScheduledJob {
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
                    let schedule = schedule_tokens(schedule);
                    quote!(::core::option::Option::Some(#schedule))
                }
                None => quote!(::core::option::Option::None),
            };
            let call = quote_spanned! {output_span=>
                ::simba::__private::job_future(async move { #ident(#term, partition).await })
            };
            let run = quote!(|term, partition| #call);
            let static_ident = format_ident!("__SIMBA_PARTITIONED_{}", name.to_uppercase());
            quote! {
                #[::simba::__private::linkme::distributed_slice(::simba::job::PARTITIONED_JOBS)]
                #[linkme(crate = ::simba::__private::linkme)]
                #[doc(hidden)]
                #[allow(non_upper_case_globals)]
                static #static_ident: ::simba::job::PartitionedJob = ::simba::job::PartitionedJob {
                    name: #name,
                    group: #group,
                    partitions: #partitions,
                    schedule: #schedule,
                    misfire: #misfire,
                    run: #run,
                };
            }
        }
    };
    quote! {
        #func
        #(#cfgs)*
        #entry
    }
}

fn schedule_tokens(schedule: &Schedule) -> TokenStream {
    match schedule {
        Schedule::Cron { expr, time_zone } => {
            let time_zone = match time_zone {
                Some(zone) => quote!(::core::option::Option::Some(#zone)),
                None => quote!(::core::option::Option::None),
            };
            quote! {
                ::simba::job::Schedule::Cron { expr: #expr, time_zone: #time_zone }
            }
        }
        Schedule::FixedRate(period) => {
            let secs = period.as_secs();
            let nanos = period.subsec_nanos();
            quote! {
                ::simba::job::Schedule::FixedRate(::core::time::Duration::new(#secs, #nanos))
            }
        }
    }
}

fn misfire_tokens(misfire: Misfire) -> TokenStream {
    match misfire {
        Misfire::Skip => quote!(::simba::job::Misfire::Skip),
        Misfire::RunOnce => quote!(::simba::job::Misfire::RunOnce),
    }
}
