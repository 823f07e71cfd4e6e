//! A small MLP trained by the MPI tests, on the executor or the eager
//! tape, with synthetic data.

use std::collections::HashMap;

use simpleop::symbol::{Executor, GradReady, GradReq, Symbol};
use simpleop::{DType, Error, NDArray, Result, Shape, autograd};
use simpleop_ops::{
    DotParams, ReduceAxesParams, SgdMomParams, SoftmaxParams, broadcast_add, dot, elemwise_mul,
    log_softmax, negative, sgd_mom_update_inplace, sum, tanh,
};

pub const FEATURES: usize = 8;
pub const HIDDEN: usize = 16;
pub const CLASSES: usize = 3;
/// A gradient-ready hook: a gradient's index (forward order) and value.
pub type Hook<'a> = &'a mut dyn FnMut(usize, &NDArray) -> Result<()>;

/// The parameters in forward order.
pub const NAMES: [&str; 4] = ["w1", "b1", "w2", "b2"];

/// `rows` synthetic rows: features uniform in [-1, 1], the class the
/// argmax of a fixed linear map.
pub fn data(rows: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let mut s = seed;
    let mut uniform = move || {
        s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) >> 11) as f32 / (1u64 << 53) as f32 * 2.0 - 1.0
    };
    let map: Vec<f32> = (0..FEATURES * CLASSES).map(|_| uniform()).collect();
    let x: Vec<f32> = (0..rows * FEATURES).map(|_| uniform()).collect();
    let y = x
        .chunks_exact(FEATURES)
        .map(|row| {
            let score = |c: usize| -> f32 {
                row.iter()
                    .enumerate()
                    .map(|(i, v)| v * map[i * CLASSES + c])
                    .sum()
            };
            (0..CLASSES)
                .max_by(|&a, &b| score(a).total_cmp(&score(b)))
                .unwrap_or(0)
        })
        .collect();
    (x, y)
}

/// The batch of `rows` as the model's inputs `x` and one-hot `target`.
pub fn batch(x: &[f32], y: &[usize], rows: &[usize]) -> Result<(NDArray, NDArray)> {
    let mut bx = Vec::with_capacity(rows.len() * FEATURES);
    let mut bt = vec![0.0f32; rows.len() * CLASSES];
    for (i, &r) in rows.iter().enumerate() {
        bx.extend_from_slice(&x[r * FEATURES..(r + 1) * FEATURES]);
        bt[i * CLASSES + y[r]] = 1.0;
    }
    Ok((
        NDArray::from_vec(bx, [rows.len(), FEATURES])?,
        NDArray::from_vec(bt, [rows.len(), CLASSES])?,
    ))
}

fn shapes() -> [(&'static str, Vec<usize>); 4] {
    [
        ("w1", vec![FEATURES, HIDDEN]),
        ("b1", vec![HIDDEN]),
        ("w2", vec![HIDDEN, CLASSES]),
        ("b2", vec![CLASSES]),
    ]
}

/// The loss `−Σ target ⊙ log_softmax(fc2(tanh(fc1(x))))`, for symbols or
/// arrays.
macro_rules! loss {
    ($x:expr, $t:expr, $w1:expr, $b1:expr, $w2:expr, $b2:expr) => {{
        let h = tanh(&broadcast_add(&dot($x, $w1, DotParams::default())?, $b1)?)?;
        let logits = broadcast_add(&dot(&h, $w2, DotParams::default())?, $b2)?;
        let log_p = log_softmax(&logits, SoftmaxParams::default())?;
        negative(&sum(
            &elemwise_mul($t, &log_p)?,
            ReduceAxesParams::default(),
        )?)
    }};
}

/// The MLP with SGD and momentum; its parameters live in a bound
/// executor (as variables for the eager path).
pub struct Model {
    exe: Executor,
    mom: Vec<NDArray>,
    eager: bool,
}

impl Model {
    /// Bound for batches of `batch` rows, weights drawn from `seed`.
    pub fn new(batch: usize, seed: u64, eager: bool) -> Result<Model> {
        let v = |n: &str| Symbol::var(n);
        let loss = loss!(
            &v("x"),
            &v("target"),
            &v("w1"),
            &v("b1"),
            &v("w2"),
            &v("b2")
        )?;
        let mut s: HashMap<String, Shape> = shapes()
            .into_iter()
            .map(|(n, s)| (n.to_string(), Shape::new(s)))
            .collect();
        s.insert("x".into(), Shape::new(vec![batch, FEATURES]));
        s.insert("target".into(), Shape::new(vec![batch, CLASSES]));
        let reqs = NAMES
            .iter()
            .map(|n| (n.to_string(), GradReq::Write))
            .collect();
        let mut exe = loss.simple_bind(&s, &HashMap::new(), reqs)?;
        let mut mom = Vec::new();
        for (k, (name, shape)) in shapes().into_iter().enumerate() {
            let fan_in = shape[0] as f64;
            let p = NDArray::random_normal(
                shape.clone(),
                0.0,
                fan_in.sqrt().recip(),
                DType::F32,
                seed + k as u64,
            )?;
            let arg = exe
                .arg_mut(name)
                .ok_or_else(|| Error::argument(name, "not bound"))?;
            *arg = p;
            if eager {
                arg.attach_grad()?;
            }
            mom.push(NDArray::zeros(shape, DType::F32));
        }
        Ok(Model { exe, mom, eager })
    }

    /// Copies of the parameters, in forward order.
    pub fn params(&self) -> Result<Vec<NDArray>> {
        NAMES
            .iter()
            .map(|n| self.arg(n).map(NDArray::deep_copy))
            .collect()
    }

    /// Copies of the momentum buffers, in forward order.
    pub fn momentum(&self) -> Vec<NDArray> {
        self.mom.iter().map(NDArray::deep_copy).collect()
    }

    /// Overwrites the parameters (and the momentum, if given).
    pub fn load(&mut self, params: &[NDArray], mom: Option<&[NDArray]>) -> Result<()> {
        for (name, p) in NAMES.iter().zip(params) {
            let arg = self
                .exe
                .arg_mut(name)
                .ok_or_else(|| Error::argument(*name, "not bound"))?;
            arg.as_slice_mut::<f32>()?
                .copy_from_slice(p.as_slice::<f32>()?);
        }
        if let Some(mom) = mom {
            for (m, v) in self.mom.iter_mut().zip(mom) {
                m.as_slice_mut::<f32>()?
                    .copy_from_slice(v.as_slice::<f32>()?);
            }
        }
        Ok(())
    }

    fn arg(&self, name: &str) -> Result<&NDArray> {
        self.exe
            .arg(name)
            .ok_or_else(|| Error::argument(name, "not bound"))
    }

    /// Forward and backward on one batch: the summed loss and the
    /// gradients in forward order (handles, valid until the next call).
    /// `hook`, if given, gets each gradient's index (forward order) and
    /// value as soon as backward has finished it.
    pub fn gradients(
        &mut self,
        x: &NDArray,
        t: &NDArray,
        hook: Option<Hook<'_>>,
    ) -> Result<(f64, Vec<NDArray>)> {
        let loss = if self.eager {
            let p = |n: &str| self.arg(n);
            let loss = autograd::record(|| loss!(x, t, p("w1")?, p("b1")?, p("w2")?, p("b2")?))?;
            match hook {
                None => loss.backward()?,
                Some(hook) => {
                    let vars = NAMES.iter().map(|n| p(n)).collect::<Result<Vec<_>>>()?;
                    autograd::backward_with_hook(&[&loss], &[], &vars, &mut |g| {
                        hook(g.index, g.grad)
                    })?
                }
            }
            loss.as_slice::<f32>()?[0]
        } else {
            self.exe.set_arg("x", x)?;
            self.exe.set_arg("target", t)?;
            self.exe.forward(true)?;
            match hook {
                None => self.exe.backward(&[])?,
                Some(hook) => {
                    self.exe
                        .backward_with_hook(&[], &mut |g: GradReady<'_>| match NAMES
                            .iter()
                            .position(|n| *n == g.name)
                        {
                            Some(k) => hook(k, g.grad),
                            None => Ok(()),
                        })?
                }
            }
            self.exe.outputs()[0].as_slice::<f32>()?[0]
        };
        Ok((f64::from(loss), self.grads()?))
    }

    /// Handles on the gradient buffers, in forward order.
    pub fn grads(&self) -> Result<Vec<NDArray>> {
        NAMES
            .iter()
            .map(|n| {
                let g = match self.eager {
                    true => self.arg(n)?.grad(),
                    false => self.exe.grad(n).cloned(),
                };
                g.ok_or_else(|| Error::argument(*n, "no gradient"))
            })
            .collect()
    }

    /// One `sgd_mom_update` of every parameter with `grads` scaled by
    /// `rescale`.
    pub fn update(&mut self, grads: &[NDArray], lr: f64, rescale: f64) -> Result<()> {
        for (k, name) in NAMES.iter().enumerate() {
            let p = SgdMomParams {
                lr,
                momentum: 0.9,
                wd: 0.0,
                rescale_grad: rescale,
                clip_gradient: -1.0,
                lazy_update: false,
            };
            let param = self
                .exe
                .arg_mut(name)
                .ok_or_else(|| Error::argument(*name, "not bound"))?;
            sgd_mom_update_inplace(param, &grads[k], &mut self.mom[k], p)?;
        }
        Ok(())
    }
}
