//! Code generation from a validated [`JobConfig`]: the function unchanged, plus one registry
//! entry in `simba::job::SCHEDULED_JOBS`, `PARTITIONED_JOBS` or `HANDLERS`. The generated code names only
//! public registry types and the `#[doc(hidden)]` `simba::__private` support module, through
//! the crate path of the configuration (`::simba` unless `crate = "..."` says otherwise).

use proc_macro2::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, PathArguments, ReturnType, Type};

use crate::args::{JobConfig, JobKind, Misfire, Overlap, Policies, Schedule};
use crate::signature::Extra;

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
    /// `, &ctx` and the state arguments, in the order the function takes them.
    extra_args: TokenStream,
    /// The `let`s before the call: the run context, and each `State<T>` read from it.
    lets: TokenStream,
    /// Whether the function takes `State<T>`: the run then ends early with the error of a
    /// missing state, so the call's outcome goes through `into_job_result`.
    takes_state: bool,
    /// The registry entry's `needs`: one `StateNeed` per `State<T>` parameter.
    needs: TokenStream,
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
    let (extra_args, lets, needs) = extra_parts(config);
    let output_span = match &func.sig.output {
        ReturnType::Type(_, ty) => ty.span(),
        ReturnType::Default => ident.span(),
    };
    // The crate path inside the call carries the output's span too, so that a future that is
    // not `Send` or a wrong return type is reported at the function, not at the attribute.
    let krate_out = respan(quote!(#krate), output_span);
    let takes_state = config.extras.iter().any(|e| matches!(e, Extra::State(_)));
    Call { term, extra_args, lets, takes_state, needs, krate_out, output_span }
}

/// The arguments after the term (and the partition), the `let`s that make them, and the
/// `StateNeed`s of the `State<T>` ones (each at the span of its parameter's type, so that a
/// `T` that is not `Clone + Send + Sync + 'static` is reported there).
fn extra_parts(config: &JobConfig) -> (TokenStream, TokenStream, TokenStream) {
    let (krate, name) = (&config.krate, &config.name);
    if config.extras.is_empty() {
        return (quote!(), quote!(), quote!(&[]));
    }
    let (mut args, mut lets, mut needs) = (Vec::new(), Vec::new(), Vec::new());
    for (i, extra) in config.extras.iter().enumerate() {
        match extra {
            Extra::Context(span) => args.push(quote_spanned!(*span=> &ctx)),
            Extra::State(ty) => {
                let var = format_ident!("__simba_state_{}", i);
                let inner = state_inner(ty);
                lets.push(quote_spanned! {ty.span()=>
                    let #var: #krate::State<#inner> = #krate::__private::state::<#inner>(&ctx, #name)?;
                });
                needs.push(quote_spanned!(ty.span()=> #krate::job::StateNeed::of::<#inner>()));
                args.push(quote!(#var));
            }
        }
    }
    (quote!(#(, #args)*), quote!(let ctx = #krate::__private::job_context(); #(#lets)*), quote!(&[#(#needs),*]))
}

/// `T` of a `State<T>` parameter (checked by the signature: one type argument).
fn state_inner(ty: &Type) -> TokenStream {
    let inner = match ty {
        Type::Path(p) => p.path.segments.last().and_then(|s| match &s.arguments {
            PathArguments::AngleBracketed(a) => a.args.first().map(|g| quote!(#g)),
            _ => None,
        }),
        Type::Paren(p) => Some(state_inner(&p.elem)),
        Type::Group(g) => Some(state_inner(&g.elem)),
        _ => None,
    };
    inner.unwrap_or_else(|| quote!(#ty))
}

/// The body of the generated run: the call of the user's function on the term, the
/// partition (`partition`: `, partition` or nothing) and the extras, boxed as a `JobFuture`.
fn run_call(ident: &syn::Ident, partition: TokenStream, c: &Call) -> TokenStream {
    let Call { term, extra_args, lets, krate_out, output_span, .. } = c;
    if c.takes_state {
        quote_spanned! {*output_span=>
            #krate_out::__private::job_future(async move {
                #lets
                #krate_out::__private::into_job_result(#ident(#term #partition #extra_args).await)
            })
        }
    } else {
        quote_spanned! {*output_span=>
            #krate_out::__private::job_future(async move { #lets #ident(#term #partition #extra_args).await })
        }
    }
}

/// A handler's run: the payload deserialised into the function's payload type (a decode
/// error ends the run, recorded `failed`), then the call with the extras.
fn handler_call(ident: &syn::Ident, payload: &Type, name: &str, c: &Call) -> TokenStream {
    let Call { term, extra_args, lets, krate_out, output_span, .. } = c;
    let payload_at = payload.span();
    let decode = quote_spanned! {payload_at=>
        let __simba_payload: #payload = #krate_out::__private::payload::<#payload>(&payload, #name)?;
    };
    quote_spanned! {*output_span=>
        #krate_out::__private::job_future(async move {
            #lets
            #decode
            #krate_out::__private::into_job_result(#ident(#term, __simba_payload #extra_args).await)
        })
    }
}

/// The job's static in `SCHEDULED_JOBS`, `PARTITIONED_JOBS` or `HANDLERS`.
fn registry_entry(func: &ItemFn, config: &JobConfig) -> TokenStream {
    let ident = &func.sig.ident;
    let name = &config.name;
    let krate = &config.krate;
    let misfire = misfire_tokens(krate, config.misfire);
    let policies = policies_tokens(krate, &config.policies);
    let call = call_parts(func, config);
    let needs = &call.needs;
    match &config.job {
        JobKind::Scheduled { lease, schedule } => {
            let schedule = schedule_tokens(krate, schedule);
            let run = run_call(ident, quote!(), &call);
            let static_ident = format_ident!("__SIMBA_SCHEDULED_{}", name.to_uppercase());
            quote! {
                #[#krate::__private::linkme::distributed_slice(#krate::job::SCHEDULED_JOBS)]
                #[linkme(crate = #krate::__private::linkme)]
                #[doc(hidden)]
                #[allow(non_upper_case_globals)]
                static #static_ident: #krate::job::ScheduledJob = #krate::__private::scheduled_job(
                    #name,
                    #lease,
                    #schedule,
                    #misfire,
                    #policies,
                    &|term| #run,
                    #needs,
                );
            }
        }
        JobKind::Handler { name: handler, payload } => {
            let run = handler_call(ident, payload, handler, &call);
            let static_ident = format_ident!("__SIMBA_HANDLER_{}", name.to_uppercase());
            quote! {
                #[#krate::__private::linkme::distributed_slice(#krate::job::HANDLERS)]
                #[linkme(crate = #krate::__private::linkme)]
                #[doc(hidden)]
                #[allow(non_upper_case_globals)]
                static #static_ident: #krate::job::Handler = #krate::__private::handler(
                    #handler,
                    &|term, payload| #run,
                    #needs,
                );
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
            let run = run_call(ident, quote!(, partition), &call);
            let static_ident = format_ident!("__SIMBA_PARTITIONED_{}", name.to_uppercase());
            quote! {
                #[#krate::__private::linkme::distributed_slice(#krate::job::PARTITIONED_JOBS)]
                #[linkme(crate = #krate::__private::linkme)]
                #[doc(hidden)]
                #[allow(non_upper_case_globals)]
                static #static_ident: #krate::job::PartitionedJob = #krate::__private::partitioned_job(
                    #name,
                    #group,
                    #partitions,
                    #schedule,
                    #misfire,
                    #policies,
                    &|term, partition| #run,
                    #needs,
                );
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

/// `simba::job::Policies::new()` with each option set (J11-J14), in a `const` context.
fn policies_tokens(krate: &syn::Path, p: &Policies) -> TokenStream {
    let dur = |d: std::time::Duration| {
        let (secs, nanos) = (d.as_secs(), d.subsec_nanos());
        quote!(::core::time::Duration::new(#secs, #nanos))
    };
    let mut out = quote!(#krate::job::Policies::new());
    if let Some(o) = p.overlap {
        let variant = match o {
            Overlap::Skip => quote!(Skip),
            Overlap::BufferOne => quote!(BufferOne),
            Overlap::AllowAll => quote!(AllowAll),
            Overlap::CancelRunning => quote!(CancelRunning),
        };
        out = quote!(#out.with_overlap(#krate::job::Overlap::#variant));
    }
    if let Some(w) = p.catch_up_window.map(dur) {
        out = quote!(#out.with_catch_up_window(#w));
    }
    if let Some(j) = p.jitter.map(dur) {
        out = quote!(#out.with_jitter(#j));
    }
    if let Some(ms) = p.start_ms {
        out = quote!(#out.with_start_ms(#ms));
    }
    if let Some(ms) = p.end_ms {
        out = quote!(#out.with_end_ms(#ms));
    }
    out
}

/// The misfire policy's variant of `simba::job::Misfire` (the rules crate's type, which may
/// grow): its name (`run_once`) in upper camel case (`RunOnce`).
fn misfire_tokens(krate: &syn::Path, misfire: Misfire) -> TokenStream {
    let camel: String = misfire
        .name()
        .split('_')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|first| first.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect();
    let variant = format_ident!("{camel}");
    quote!(#krate::job::Misfire::#variant)
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
