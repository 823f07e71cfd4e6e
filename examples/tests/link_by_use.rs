//! The other documented way to link an ops crate that is only used by
//! name: `use the_crate as _;`. No item of `simpleop_examples` is named
//! anywhere in this file.

use simpleop::{Attrs, NDArray, Registry, eager};
use simpleop_examples as _;

#[test]
fn ops_are_registered_when_the_crate_is_used_as_underscore() {
    let registry = Registry::global().expect("no duplicate op names");
    for name in ["softplus", "scaled_tanh", "row_scale"] {
        assert!(registry.contains(name), "`{name}` is not registered");
    }
    let x = NDArray::from_vec(vec![0.0f32], [1]).unwrap();
    let y = eager::invoke("softplus", &[&x], &Attrs::new()).unwrap();
    assert!((y.to_f64_vec()[0] - std::f64::consts::LN_2).abs() < 1e-7);
}
