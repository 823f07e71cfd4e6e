//! An eager tour of `NDArray`: arithmetic, in-place calls, `+=` as an
//! `AddTo` write, broadcasting, f16/bf16, and `.npy` files.
//!
//! ```text
//! cargo run --example tour
//! ```

use simpleop::{DType, NDArray, OpReqType, bf16, f16};
use simpleop_examples::{softplus, softplus_inplace, softplus_into};
use simpleop_ops::{ReduceAxesParams, broadcast_mul, exp, relu, relu_inplace, sqrt_inplace, sum};

fn main() -> simpleop::Result<()> {
    // Operators map to registered ops by name, so the op crates must be
    // linked; the typed calls below would do it too.
    simpleop_ops::link();
    simpleop_examples::link();

    // Arithmetic: operators return `Result`, a shape mismatch is an error.
    let x = NDArray::from_vec(vec![1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0], [2, 3])?;
    let y = ((&x * &x)? + 1.0)?; // elemwise_mul, then _plus_scalar
    println!("x            = {x:?}");
    println!("x*x + 1      = {y:?}");
    println!("relu(x)      = {:?}", relu(&x)?);
    println!("exp(-|x|)    = {:?}", exp(&(-&simpleop_ops::abs(&x)?)?)?);
    let bad = &x + &NDArray::zeros([4], DType::F32);
    println!("(2,3) + (4,) -> {}", bad.unwrap_err());

    // In place: writes into x's own buffer when nothing else shares it.
    let mut z = x.deep_copy();
    relu_inplace(&mut z)?;
    sqrt_inplace(&mut z)?;
    println!("sqrt(relu(x)) in place = {z:?}");
    // A clone shares storage copy-on-write: the in-place call leaves it alone.
    let mut a = x.clone();
    softplus_inplace(&mut a)?;
    println!("x after softplus_inplace on a clone = {x:?}");

    // AddTo: `+=` accumulates into the left buffer (OpReqType::AddTo), and
    // every op's `_into` form takes a request type.
    let mut acc = NDArray::zeros([2, 3], DType::F32);
    acc += &x;
    acc += &x;
    println!("0 + x + x    = {acc:?}");
    softplus_into(&x, &mut acc, OpReqType::AddTo)?;
    println!("+ softplus(x)= {acc:?}");
    acc *= 0.5;
    println!("* 0.5        = {acc:?}");

    // Broadcasting: (2, 3) with (3,) and (2, 1), NumPy rules.
    let row = NDArray::from_vec(vec![10.0f32, 20.0, 30.0], [3])?;
    let col = NDArray::from_vec(vec![1.0f32, -1.0], [2, 1])?;
    println!("x + row      = {:?}", (&x + &row)?);
    println!("x * col      = {:?}", broadcast_mul(&x, &col)?);
    let mut b = x.deep_copy();
    b += &row; // broadcast_add, in place
    println!("x += row     = {b:?}");
    println!(
        "sum(x, axis=1) = {:?}",
        sum(
            &x,
            ReduceAxesParams {
                axis: Some(vec![1]),
                ..Default::default()
            }
        )?
    );

    // Half types: stored as f16/bf16, computed in f32.
    let h = NDArray::from_vec([0.5f32, 1.0, 2.0].map(f16::from_f32).to_vec(), [3])?;
    let g = NDArray::from_vec([0.5f32, 1.0, 2.0].map(bf16::from_f32).to_vec(), [3])?;
    println!("softplus(f16)  = {:?}", softplus(&h)?);
    println!("softplus(bf16) = {:?}", softplus(&g)?);
    println!("f16 -> f32     = {:?}", h.astype(DType::F32));

    // .npy files: float32/64, float16, int32/64, uint8.
    let dir = std::env::temp_dir().join("simpleop-tour");
    std::fs::create_dir_all(&dir).map_err(|e| simpleop::Error::Io {
        op: "tour".into(),
        path: dir.display().to_string(),
        reason: e.to_string(),
    })?;
    let path = dir.join("y.npy");
    y.save_npy(&path)?;
    let back = NDArray::load_npy(&path)?;
    assert_eq!(back, y);
    println!("saved and loaded {}: {back:?}", path.display());
    h.save_npy(dir.join("h.npy"))?;
    println!(
        "f16 round trip: {:?}",
        NDArray::load_npy(dir.join("h.npy"))?
    );
    // bfloat16 has no NumPy dtype: an error naming the way out.
    println!(
        "bf16 save -> {}",
        g.save_npy(dir.join("g.npy")).unwrap_err()
    );
    Ok(())
}
