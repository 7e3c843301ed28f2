//! Attribute macros for the `simba` crate: `#[simba_scheduled]`, `#[simba_partitioned]` and
//! `#[simba_handler]`.
//!
//! Use them through the `simba` crate (`use simba::{simba_scheduled, simba_partitioned};`),
//! which re-exports them: the code they generate names `::simba`, or the path given with
//! `crate = "..."` (a renamed dependency, or a facade crate). Each macro keeps the
//! function as written and adds a registry entry (`simba::job::ScheduledJob` or
//! `simba::job::PartitionedJob`) that `simba::run()` finds at link time; the entry is plain
//! data that can also be written by hand. Cron expressions, durations, time zones and lease
//! names are checked at compile time.

use proc_macro::TokenStream;

mod args;
mod expand;
mod kind;
mod signature;

use kind::Kind;

#[doc = include_str!("docs/scheduled.md")]
#[proc_macro_attribute]
pub fn simba_scheduled(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(Kind::Scheduled, args, item)
}

#[doc = include_str!("docs/partitioned.md")]
#[proc_macro_attribute]
pub fn simba_partitioned(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(Kind::Partitioned, args, item)
}

#[doc = include_str!("docs/handler.md")]
#[proc_macro_attribute]
pub fn simba_handler(args: TokenStream, item: TokenStream) -> TokenStream {
    entry(Kind::Handler, args, item)
}

/// Parses, validates and expands; on any error, emits the function unchanged plus the errors,
/// so that editors still see the function (completion, go-to-definition) while it is wrong.
fn entry(kind: Kind, args: TokenStream, item: TokenStream) -> TokenStream {
    let item = proc_macro2::TokenStream::from(item);
    let func: syn::ItemFn = match syn::parse2(item.clone()) {
        Ok(func) => func,
        Err(e) => {
            let e = syn::Error::new(e.span(), format!("{e}; a job is an `async fn`"));
            return with_error(item, e);
        }
    };
    match args::parse(kind, args.into(), &func) {
        Ok(config) => expand::expand(&func, &config).into(),
        Err(e) => with_error(item, e),
    }
}

fn with_error(item: proc_macro2::TokenStream, error: syn::Error) -> TokenStream {
    let error = error.into_compile_error();
    quote::quote!(#item #error).into()
}
