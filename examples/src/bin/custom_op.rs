//! Runs the ops of `simpleop-examples` eagerly (through their typed
//! functions, by name, into an existing output, in place, and on f16), then
//! in a symbolic graph with autodiff.

use std::collections::HashMap;

use simpleop::symbol::{GradReq, Symbol};
use simpleop::{Attrs, DType, NDArray, OpReqType, eager, f16};
use simpleop_examples::{
    RowScaleParams, row_scale, row_scale_into, scaled_tanh, scaled_tanh_inplace, softplus,
    softplus_inplace, softplus_into,
};

fn main() -> Result<(), simpleop::Error> {
    // By-name calls below need the crate linked; the typed calls already
    // reference it, but calling `link` is the documented habit.
    simpleop_examples::link();

    let x = NDArray::from_vec(vec![-30.0f32, -1.0, 0.0, 1.0, 30.0], [5])?;
    println!("x                      = {x:?}");

    // softplus: typed, by name, into (AddTo), in place.
    let y = softplus(&x)?;
    println!("softplus(x)            = {y:?}");
    let by_name = eager::invoke("softplus", &[&x], &Attrs::new())?;
    println!("invoke(\"softplus\")     = {by_name:?}");
    assert_eq!(y, by_name);

    let mut acc = NDArray::ones([5], DType::F32);
    softplus_into(&x, &mut acc, OpReqType::AddTo)?;
    println!("1 + softplus(x), AddTo = {acc:?}");

    let mut z = x.deep_copy();
    softplus_inplace(&mut z)?;
    println!("softplus_inplace(x)    = {z:?}");

    // scaled_tanh: the scalar as a typed argument or a string attribute.
    let t = scaled_tanh(&x, 0.7)?;
    println!("scaled_tanh(x, 0.7)    = {t:?}");
    let t_name = eager::invoke("scaled_tanh", &[&x], &Attrs::from([("scalar", "0.7")]))?;
    println!("invoke(\"scaled_tanh\")  = {t_name:?}");
    let mut t_in = x.deep_copy();
    scaled_tanh_inplace(&mut t_in, 0.7)?;
    println!("scaled_tanh_inplace    = {t_in:?}");

    // row_scale: kwargs as a struct or as MXNet-style string attributes.
    let m = NDArray::from_vec(vec![1.0f64, 2.0, 3.0, 4.0, 5.0, 6.0], [3, 2])?;
    let r = row_scale(&m, RowScaleParams { factor: 0.5 })?;
    println!("row_scale(m, 0.5)      = {r:?}");
    let r_name = eager::invoke("row_scale", &[&m], &Attrs::from([("factor", "0.5")]))?;
    println!("invoke(\"row_scale\")    = {r_name:?}");
    let r_default = eager::invoke("row_scale", &[&m], &Attrs::new())?;
    println!("row_scale(m), factor 1 = {r_default:?}");
    let mut r_acc = m.deep_copy();
    row_scale_into(
        &m,
        RowScaleParams { factor: 0.5 },
        &mut r_acc,
        OpReqType::AddTo,
    )?;
    println!("m + row_scale(m, 0.5)  = {r_acc:?}");

    // f16: the same kernels, computed in f32 and rounded at the edges.
    let h = NDArray::from_vec([-2.0f32, 0.0, 0.5, 3.0].map(f16::from_f32).to_vec(), [2, 2])?;
    println!("h (f16)                = {h:?}");
    println!("softplus(h)            = {:?}", softplus(&h)?);
    println!("scaled_tanh(h, 0.7)    = {:?}", scaled_tanh(&h, 0.7)?);
    println!(
        "row_scale(h, 2)        = {:?}",
        row_scale(&h, RowScaleParams { factor: 2.0 })?
    );

    // Errors name the op and the argument.
    let bad = eager::invoke("row_scale", &[&m], &Attrs::from([("fator", "2")]));
    println!("bad kwarg              -> {}", bad.unwrap_err());
    let one_d = eager::invoke("row_scale", &[&x], &Attrs::new());
    println!("1-D input              -> {}", one_d.unwrap_err());

    // In a graph: the same typed functions take a `Symbol` and add nodes;
    // the executor differentiates through the registered gradients.
    let xs = Symbol::var("x");
    let ys = row_scale(&softplus(&xs)?, RowScaleParams { factor: 0.5 })?;
    let args = HashMap::from([("x".to_string(), m.astype(DType::F32))]);
    let grads = HashMap::from([("x".to_string(), NDArray::zeros([3, 2], DType::F32))]);
    let reqs = HashMap::from([("x".to_string(), GradReq::Write)]);
    let mut exe = ys.bind(args, grads, reqs)?;
    exe.forward(true)?;
    exe.backward(&[])?; // head gradient: ones
    println!("graph: row_scale(softplus(x), 0.5)");
    println!("  forward              = {:?}", exe.outputs()[0]);
    let dx = exe
        .grad("x")
        .ok_or_else(|| simpleop::Error::argument("x", "no gradient buffer"))?;
    println!("  d/dx                 = {dx:?}");
    println!("  memory               = {:?}", exe.memory_stats());
    println!("  MXNet JSON           = {} bytes", ys.to_json().len());
    Ok(())
}
