//! `#[derive(PersistentActor)]` for actix-persistence.
//!
//! Use it through the facade crate: `use actix_persistence::PersistentActor;`.
//!
//! The derive finds the struct's [`PersistenceState`] field (the one marked `#[persistence]`,
//! or else the one whose type is named `PersistenceState`) and generates:
//! - `impl actix::Actor` with `Context<Self>` and a `started` that starts recovery, so no
//!   command is handled before the actor's events were replayed;
//! - `impl PersistentActor` with the two state accessors.
//!
//! The domain side, `EventSourced` (event type and `apply`), stays hand-written.
//!
//! [`PersistenceState`]: https://docs.rs/actix-persistence/latest/actix_persistence/struct.PersistenceState.html

use proc_macro::TokenStream;
use proc_macro2::TokenStream as TokenStream2;
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{parse_macro_input, Data, DeriveInput, Field, Fields, Member, Type};

/// Derives `actix::Actor` (recovering on start) and `PersistentActor` for a struct holding a
/// `PersistenceState<Self>` field.
///
/// Mark the field with `#[persistence]` when its type is behind an alias. The output names the
/// facade `::actix_persistence`; `#[actix_persistence(crate = "path")]` on the struct names it
/// elsewhere (a renamed dependency, or a crate of yours that re-exports it), as
/// `#[serde(crate = "..")]` does.
///
/// The derived `Actor` has two hooks, named on the struct:
/// - `#[actix_persistence(started = "Self::on_started")]`: a `fn(&mut Self, &mut Context<Self>)`
///   called at the end of `Actor::started`, after recovery was started and before it
///   completes (the state is not recovered yet: for work on the recovered state use
///   `EventSourced::on_recovery_completed`). E.g. `ctx.set_mailbox_capacity(..)`.
/// - `#[actix_persistence(stopped = "Self::on_stopped")]`: the same signature, called as
///   `Actor::stopped`.
#[proc_macro_derive(PersistentActor, attributes(persistence, actix_persistence))]
pub fn derive_persistent_actor(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let ActorOptions {
        krate,
        started,
        stopped,
    } = actor_options(&input.attrs)?;
    let (field, ty) = persistence_field(input)?;
    check_state_of_self(input, ty)?;
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    // Spanned on the field's type: a field of another type (behind `#[persistence]`) is
    // reported there, not on the derive.
    let state = quote_spanned!(ty.span()=> &self.#field);
    let state_mut = quote_spanned!(ty.span()=> &mut self.#field);
    // Zero or one call each.
    let (started, stopped) = (started.iter(), stopped.iter());
    Ok(quote! {
        impl #impl_generics #krate::actix::Actor for #name #ty_generics #where_clause {
            type Context = #krate::actix::Context<Self>;

            fn started(&mut self, ctx: &mut Self::Context) {
                #krate::start_recovery(self, ctx);
                #(#started(self, ctx);)*
            }

            #(
                fn stopped(&mut self, ctx: &mut Self::Context) {
                    #stopped(self, ctx);
                }
            )*
        }

        impl #impl_generics #krate::PersistentActor for #name #ty_generics #where_clause {
            fn persistence(&self) -> &#krate::PersistenceState<Self> {
                #state
            }

            fn persistence_mut(&mut self) -> &mut #krate::PersistenceState<Self> {
                #state_mut
            }
        }
    })
}

/// Derives `actix::Message` through the facade, so a crate that depends only on
/// `actix-persistence` needs no `actix` dependency of its own: `#[rtype(result = "T")]` (or
/// `#[rtype(result = T)]`, `#[rtype("T")]`, `#[rtype(T)]`) names the reply type, `()` when
/// absent; a second `#[rtype]` is an error. As actix's own derive, with paths into
/// `actix_persistence::actix` (`#[actix_persistence(crate = "path")]` names the facade
/// elsewhere).
#[proc_macro_derive(Message, attributes(rtype, actix_persistence))]
pub fn derive_message(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand_message(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand_message(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let krate = facade_path(&input.attrs)?;
    let mut result: Option<Type> = None;
    for attr in input.attrs.iter().filter(|a| a.path().is_ident("rtype")) {
        let parsed = attr.parse_args_with(parse_rtype)?;
        if result.is_some() {
            return Err(syn::Error::new_spanned(
                attr,
                "#[derive(Message)]: duplicate #[rtype]; name the reply type once",
            ));
        }
        result = Some(parsed);
    }
    let result = match result {
        Some(ty) => quote!(#ty),
        None => quote!(()),
    };
    let name = &input.ident;
    let (impl_generics, ty_generics, where_clause) = input.generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #krate::actix::Message for #name #ty_generics #where_clause {
            type Result = #result;
        }
    })
}

/// The reply type of `#[rtype(..)]`, in each form actix's own derive takes:
/// `result = "Type"`, `result = Type`, `"Type"` and `Type`.
fn parse_rtype(stream: syn::parse::ParseStream) -> syn::Result<Type> {
    if stream.peek(syn::Ident) && stream.peek2(syn::Token![=]) {
        let key: syn::Ident = stream.parse()?;
        if key != "result" {
            return Err(syn::Error::new(
                key.span(),
                "expected `result = Type` or `result = \"Type\"`",
            ));
        }
        stream.parse::<syn::Token![=]>()?;
    }
    let expected = |error: syn::Error| {
        syn::Error::new(
            error.span(),
            "#[rtype] expects the reply type: `result = Type` or `result = \"Type\"`",
        )
    };
    let ty = if stream.peek(syn::LitStr) {
        let text: syn::LitStr = stream.parse()?;
        text.parse::<Type>().map_err(expected)?
    } else {
        stream.parse::<Type>().map_err(expected)?
    };
    if !stream.is_empty() {
        return Err(stream.error(
            "#[rtype] names one reply type; for several values use a tuple: \
             `#[rtype(result = \"(A, B)\")]`",
        ));
    }
    Ok(ty)
}

/// Derives `actix::dev::MessageResponse` through the facade, as actix's own derive: a handler
/// returns the type itself as the reply of any message whose `Result` is that type
/// (`#[actix_persistence(crate = "path")]` names the facade elsewhere).
#[proc_macro_derive(MessageResponse, attributes(actix_persistence))]
pub fn derive_message_response(input: TokenStream) -> TokenStream {
    let input = parse_macro_input!(input as DeriveInput);
    expand_message_response(&input)
        .unwrap_or_else(syn::Error::into_compile_error)
        .into()
}

fn expand_message_response(input: &DeriveInput) -> syn::Result<TokenStream2> {
    let krate = facade_path(&input.attrs)?;
    let name = &input.ident;
    let (_, ty_generics, _) = input.generics.split_for_impl();
    let mut generics = input.generics.clone();
    generics
        .params
        .push(syn::parse_quote!(__A: #krate::actix::Actor));
    generics.params.push(syn::parse_quote!(
        __M: #krate::actix::Message<Result = #name #ty_generics>
    ));
    let (impl_generics, _, where_clause) = generics.split_for_impl();
    Ok(quote! {
        impl #impl_generics #krate::actix::dev::MessageResponse<__A, __M>
            for #name #ty_generics #where_clause
        {
            fn handle(
                self,
                _: &mut <__A as #krate::actix::Actor>::Context,
                tx: ::core::option::Option<#krate::actix::dev::OneshotSender<Self>>,
            ) {
                if let ::core::option::Option::Some(tx) = tx {
                    let _ = tx.send(self);
                }
            }
        }
    })
}

/// Runs an `async fn main` in an Actix system, as `#[actix::main]` does, through the facade:
/// `Persistence::start` needs a running Actix system (under `#[tokio::main]` it returns
/// `StartError::NoActixSystem`). `#[actix_persistence::main(crate = "path")]` names the facade
/// when it is renamed or re-exported.
#[proc_macro_attribute]
pub fn main(args: TokenStream, item: TokenStream) -> TokenStream {
    in_system(args.into(), item.into(), "#[actix_persistence::main]", None).into()
}

/// Runs an `async fn` test in an Actix system, as `#[actix::test]` does, through the facade:
/// `#[actix_persistence::test]` (also `actix_persistence::actix::test`).
/// `#[actix_persistence::test(crate = "path")]` names the facade when it is renamed or
/// re-exported.
#[proc_macro_attribute]
pub fn test(args: TokenStream, item: TokenStream) -> TokenStream {
    in_system(
        args.into(),
        item.into(),
        "#[actix_persistence::actix::test]",
        Some(quote!(#[::core::prelude::v1::test])),
    )
    .into()
}

/// `item`, an `async fn`, as a function that runs its body in a new Actix system, with
/// `marker` (`#[test]`) above it.
fn in_system(
    args: TokenStream2,
    item: TokenStream2,
    what: &str,
    marker: Option<TokenStream2>,
) -> TokenStream2 {
    let mut function = match syn::parse2::<syn::ItemFn>(item) {
        Ok(function) => function,
        Err(error) => return error.into_compile_error(),
    };
    if function.sig.asyncness.take().is_none() {
        // The function as written goes out with the error: no second error about a missing
        // `main` (as tokio's and actix-rt's attributes do).
        let error = syn::Error::new(
            function.sig.fn_token.span(),
            format!("{what} needs an `async fn`"),
        )
        .into_compile_error();
        return quote!(#error #function);
    }
    let mut krate: Option<syn::Path> = None;
    let parser = syn::meta::parser(|meta| crate_key(&meta, &mut krate, what));
    let error = syn::parse::Parser::parse2(parser, args)
        .err()
        .map(syn::Error::into_compile_error);
    let krate = krate.unwrap_or_else(|| syn::parse_quote!(::actix_persistence));
    let attrs = &function.attrs;
    let vis = &function.vis;
    let sig = &function.sig;
    let body = &function.block;
    quote! {
        #error
        #marker
        #(#attrs)*
        #vis #sig {
            #krate::actix::System::new().block_on(async move #body)
        }
    }
}

/// The path of the facade crate in the derive's output: `::actix_persistence`, or the path
/// of `#[actix_persistence(crate = "path")]` on the item, for a crate that renamed the facade
/// in its Cargo.toml or reaches it through a crate of its own that re-exports it.
/// The struct-level options of `#[derive(PersistentActor)]`:
/// `#[actix_persistence(crate = "path", started = "path", stopped = "path")]`.
struct ActorOptions {
    krate: syn::Path,
    /// Called at the end of the derived `Actor::started`, after recovery was started.
    started: Option<syn::Path>,
    /// Called as the derived `Actor::stopped`.
    stopped: Option<syn::Path>,
}

fn actor_options(attrs: &[syn::Attribute]) -> syn::Result<ActorOptions> {
    let (mut krate, mut started, mut stopped) = (None, None, None);
    for attr in attrs
        .iter()
        .filter(|a| a.path().is_ident("actix_persistence"))
    {
        attr.parse_nested_meta(|meta| {
            let (slot, key) = if meta.path.is_ident("started") {
                (&mut started, "started")
            } else if meta.path.is_ident("stopped") {
                (&mut stopped, "stopped")
            } else if meta.path.is_ident("crate") {
                return crate_key(&meta, &mut krate, "#[actix_persistence(..)]");
            } else {
                return Err(meta.error(
                    "#[actix_persistence(..)] on a persistent actor takes `crate = \"path\"` \
                     (the path of actix-persistence), and `started = \"path\"` and \
                     `stopped = \"path\"` (functions the derived Actor calls)",
                ));
            };
            if slot.is_some() {
                return Err(meta.error(format!(
                    "#[actix_persistence(..)]: duplicate `{key}`; give it once"
                )));
            }
            let text: syn::LitStr = meta.value()?.parse()?;
            *slot = Some(text.parse()?);
            Ok(())
        })?;
    }
    Ok(ActorOptions {
        krate: krate.unwrap_or_else(|| syn::parse_quote!(::actix_persistence)),
        started,
        stopped,
    })
}

fn facade_path(attrs: &[syn::Attribute]) -> syn::Result<syn::Path> {
    let mut krate: Option<syn::Path> = None;
    for attr in attrs
        .iter()
        .filter(|a| a.path().is_ident("actix_persistence"))
    {
        attr.parse_nested_meta(|meta| crate_key(&meta, &mut krate, "#[actix_persistence(..)]"))?;
    }
    Ok(krate.unwrap_or_else(|| syn::parse_quote!(::actix_persistence)))
}

/// Parses `crate = "path"`, the one key of `what`, into `krate`.
fn crate_key(
    meta: &syn::meta::ParseNestedMeta,
    krate: &mut Option<syn::Path>,
    what: &str,
) -> syn::Result<()> {
    if !meta.path.is_ident("crate") {
        return Err(meta.error(format!(
            "{what} takes one key, `crate = \"path\"` (the path of actix-persistence)"
        )));
    }
    if krate.is_some() {
        return Err(meta.error(format!("{what}: duplicate `crate`; give it once")));
    }
    let text: syn::LitStr = meta.value()?.parse()?;
    *krate = Some(text.parse()?);
    Ok(())
}

/// A field `PersistenceState<X>` must hold the state of the actor itself: `X` is `Self` or
/// the struct's own name. Another type (a copy-paste from another actor) would otherwise fail
/// as two mismatched types inside the derive's output.
fn check_state_of_self(input: &DeriveInput, ty: &Type) -> syn::Result<()> {
    let Type::Path(path) = ty else { return Ok(()) };
    let Some(last) = path.path.segments.last() else {
        return Ok(());
    };
    if last.ident != "PersistenceState" {
        return Ok(());
    }
    let syn::PathArguments::AngleBracketed(args) = &last.arguments else {
        return Ok(());
    };
    let types: Vec<&Type> = args
        .args
        .iter()
        .filter_map(|arg| match arg {
            syn::GenericArgument::Type(ty) => Some(ty),
            _ => None,
        })
        .collect();
    let [Type::Path(actor)] = types.as_slice() else {
        return Ok(());
    };
    let is_self = actor.qself.is_none()
        && actor
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "Self" || s.ident == input.ident);
    if is_self {
        return Ok(());
    }
    let name = &input.ident;
    let found = quote!(#actor).to_string().replace(' ', "");
    Err(syn::Error::new(
        actor.span(),
        format!(
            "#[derive(PersistentActor)]: the persistence state of `{name}` must be \
             `PersistenceState<Self>` (the state of this actor), found `PersistenceState<{found}>`"
        ),
    ))
}

/// The member holding the persistence state and its type: the `#[persistence]` field, or the
/// only field whose type is named `PersistenceState`.
fn persistence_field(input: &DeriveInput) -> syn::Result<(Member, &Type)> {
    let fields = match &input.data {
        Data::Struct(data) => &data.fields,
        _ => {
            return Err(syn::Error::new(
                input.ident.span(),
                "#[derive(PersistentActor)] works on structs only",
            ))
        }
    };
    let members: Vec<(Member, &Field)> = match fields {
        Fields::Named(named) => named
            .named
            .iter()
            .filter_map(|f| f.ident.clone().map(|i| (Member::Named(i), f)))
            .collect(),
        Fields::Unnamed(unnamed) => unnamed
            .unnamed
            .iter()
            .enumerate()
            .map(|(i, f)| (Member::Unnamed(i.into()), f))
            .collect(),
        Fields::Unit => Vec::new(),
    };
    if let Some(attr) = input
        .attrs
        .iter()
        .find(|a| a.path().is_ident("persistence"))
    {
        return Err(syn::Error::new_spanned(
            attr,
            "#[persistence] goes on the field holding the actor's `PersistenceState<Self>`, \
             not on the struct",
        ));
    }
    let mut marked = Vec::new();
    let mut marks = Vec::new();
    for member in &members {
        if let Some(mark) = marker(member.1)? {
            marked.push(member);
            marks.push(mark);
        }
    }
    if let [_, second, ..] = marks.as_slice() {
        return Err(syn::Error::new_spanned(
            second,
            "#[persistence] marks more than one field; keep it on the one field holding the \
             actor's `PersistenceState<Self>`",
        ));
    }
    let candidates = if marked.is_empty() {
        members
            .iter()
            .filter(|(_, f)| is_persistence_state(&f.ty))
            .collect()
    } else {
        marked
    };
    match candidates.as_slice() {
        [(member, field)] => Ok((member.clone(), &field.ty)),
        [] => Err(syn::Error::new(
            input.ident.span(),
            "#[derive(PersistentActor)] needs a field of type `PersistenceState<Self>` \
             (or one marked `#[persistence]`)",
        )),
        [_, (_, second), ..] => Err(syn::Error::new(
            second.span(),
            "#[derive(PersistentActor)] found more than one persistence state field; \
             mark the one to use with `#[persistence]`",
        )),
    }
}

/// The `#[persistence]` marker of `field`, if it has one: the bare attribute, once.
fn marker(field: &Field) -> syn::Result<Option<&syn::Attribute>> {
    let mut marks = field
        .attrs
        .iter()
        .filter(|a| a.path().is_ident("persistence"));
    let Some(first) = marks.next() else {
        return Ok(None);
    };
    if !matches!(first.meta, syn::Meta::Path(_)) {
        return Err(syn::Error::new_spanned(
            &first.meta,
            "#[persistence] takes no arguments: write `#[persistence]` on the field holding \
             the actor's `PersistenceState<Self>`",
        ));
    }
    if let Some(second) = marks.next() {
        return Err(syn::Error::new_spanned(
            second,
            "duplicate #[persistence] on this field; write it once",
        ));
    }
    Ok(Some(first))
}

fn is_persistence_state(ty: &Type) -> bool {
    match ty {
        Type::Path(path) => path
            .path
            .segments
            .last()
            .is_some_and(|s| s.ident == "PersistenceState"),
        _ => false,
    }
}
