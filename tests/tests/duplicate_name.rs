//! Two linked crates defining one op name: the global registry refuses to
//! build, and the error names both definitions. (Its own test binary,
//! because it poisons the global registry on purpose.)

use simpleop::{Error, Registry, simple_op};

/// A second `relu`, clashing with simpleop-ops' one.
#[simple_op(name = "relu")]
mod my_relu {
    use simpleop::prelude::*;
    pub fn forward<T: Float>(x: T) -> T {
        x
    }
}

#[test]
fn duplicate_names_are_reported_with_both_locations() {
    simpleop_ops::link();
    let e = Registry::global().unwrap_err();
    let Error::DuplicateOp { op, first, second } = &e else {
        panic!("{e}")
    };
    assert_eq!(op, "relu");
    let both = format!("{first} {second}");
    assert!(both.contains("ops/src/activation.rs"), "{e}");
    assert!(both.contains("tests/duplicate_name.rs"), "{e}");
    // Every call through the registry reports it, rather than picking one.
    assert!(matches!(
        simpleop::eager::lookup("relu"),
        Err(Error::DuplicateOp { .. })
    ));

    // The same rule holds for explicit registries.
    let mut reg = Registry::new();
    reg.register(&simpleop_ops::relu::OP).unwrap();
    let e = reg.register(&my_relu::OP).unwrap_err();
    assert!(
        e.to_string().starts_with("op `relu` is defined twice"),
        "{e}"
    );
    // Registering the very same definition twice is harmless.
    reg.register(&simpleop_ops::relu::OP).unwrap();
    assert_eq!(reg.len(), 1);
}
