//! Finding an op's registration, and seeding its random stream: what
//! every eager entry point does first.

use std::borrow::Cow;
use std::cell::Cell;

use crate::{EnvArguments, Error, OpDef, RegisteredOp, Registry, Result};

/// Looks an op up in the global registry.
pub fn lookup(name: &str) -> Result<&'static RegisteredOp> {
    Registry::global()?.get(name)
}

pub(crate) fn registered(op: &'static OpDef) -> Result<&'static RegisteredOp> {
    thread_local! {
        // The last op looked up: the global registry never changes once
        // built, so a typed call in a loop skips the name's hash lookup.
        static LAST: Cell<Option<(&'static OpDef, &'static RegisteredOp)>> =
            const { Cell::new(None) };
    }
    if let Some((def, entry)) = LAST.get()
        && std::ptr::eq(def, op)
    {
        return Ok(entry);
    }
    let entry = lookup(op.name)?;
    if !std::ptr::eq(entry.def, op) {
        return Err(Error::DuplicateOp {
            op: op.name.into(),
            first: entry.def.location.into(),
            second: op.location.into(),
        });
    }
    LAST.set(Some((op, entry)));
    Ok(entry)
}

/// `env`, with a seed drawn now when the op uses random numbers and none
/// was given, so that the call is reproducible from its arguments.
pub(super) fn seeded<'e>(op: &OpDef, env: &'e EnvArguments) -> Cow<'e, EnvArguments> {
    if op.resources.rng {
        Cow::Owned(env.clone().with_seed(env.seed_or_draw()))
    } else {
        Cow::Borrowed(env)
    }
}
