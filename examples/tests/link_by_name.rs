//! An ops crate used only by name is linked once its `link()` is called.
//!
//! This file references `simpleop_examples` exactly once, through `link()`;
//! everything else goes through the registry by name.

use simpleop::{Attrs, DType, NDArray, Registry, eager};

#[test]
fn ops_are_registered_after_link() {
    simpleop_examples::link();

    let registry = Registry::global().expect("no duplicate op names");
    for name in ["softplus", "scaled_tanh", "row_scale"] {
        assert!(registry.contains(name), "`{name}` is not registered");
    }
    // This test binary does not link simpleop-ops: only our ops are there.
    assert!(!registry.contains("relu"));

    let x = NDArray::from_vec(vec![0.0f64, 1.0], [2]).unwrap();
    let y = eager::invoke("softplus", &[&x], &Attrs::new()).unwrap();
    assert_eq!(y.dtype(), DType::F64);
    let y = y.to_f64_vec();
    assert!((y[0] - std::f64::consts::LN_2).abs() < 1e-15, "{y:?}");
    assert!((y[1] - 1.313_261_687_518_222_8).abs() < 1e-15, "{y:?}");

    let t = eager::invoke("scaled_tanh", &[&x], &Attrs::from([("scalar", "2")])).unwrap();
    assert!((t.to_f64_vec()[1] - 2.0f64.tanh()).abs() < 1e-15);

    let m = NDArray::ones([2, 2], DType::F32);
    let r = eager::invoke("row_scale", &[&m], &Attrs::from([("factor", "3")])).unwrap();
    assert_eq!(r.to_f64_vec(), [3.0, 3.0, 6.0, 6.0]);
}
