//! `Convolution` and `Deconvolution` against a direct f64 reference (the
//! textbook sums, written independently of the kernels): 1-D to 3-D,
//! strides, dilations, padding, groups, depthwise with multipliers,
//! pointwise windows, column tiles and the split over threads; every
//! request; and the gradient checker on every float dtype and request.

use simpleop::gradcheck::GradCheck;
use simpleop::{Attrs, DType, NDArray, OpReqType, eager};
use simpleop_tests::assert_close;

/// One convolution: data shape, kernel, stride, dilate, pad, filters,
/// groups (per axis lists as long as the kernel).
#[derive(Clone, Debug)]
struct Case {
    data: Vec<usize>,
    kernel: Vec<usize>,
    stride: Vec<usize>,
    dilate: Vec<usize>,
    pad: Vec<usize>,
    filters: usize,
    groups: usize,
}

fn tuple(v: &[usize]) -> String {
    let parts: Vec<String> = v.iter().map(usize::to_string).collect();
    format!("({},)", parts.join(", "))
}

impl Case {
    fn new(data: &[usize], kernel: &[usize], filters: usize) -> Case {
        let n = kernel.len();
        Case {
            data: data.to_vec(),
            kernel: kernel.to_vec(),
            stride: vec![1; n],
            dilate: vec![1; n],
            pad: vec![0; n],
            filters,
            groups: 1,
        }
    }
    fn stride(mut self, s: &[usize]) -> Case {
        self.stride = s.to_vec();
        self
    }
    fn dilate(mut self, d: &[usize]) -> Case {
        self.dilate = d.to_vec();
        self
    }
    fn pad(mut self, p: &[usize]) -> Case {
        self.pad = p.to_vec();
        self
    }
    fn groups(mut self, g: usize) -> Case {
        self.groups = g;
        self
    }
    fn attrs(&self, no_bias: bool) -> Attrs {
        Attrs::new()
            .with("kernel", tuple(&self.kernel))
            .with("stride", tuple(&self.stride))
            .with("dilate", tuple(&self.dilate))
            .with("pad", tuple(&self.pad))
            .with("num_filter", self.filters)
            .with("num_group", self.groups)
            .with("no_bias", if no_bias { "True" } else { "False" })
    }
    fn spatial(&self) -> usize {
        self.kernel.len()
    }
    fn out_sizes(&self) -> Vec<usize> {
        (0..self.spatial())
            .map(|a| {
                let reach = self.dilate[a] * (self.kernel[a] - 1) + 1;
                (self.data[2 + a] + 2 * self.pad[a] - reach) / self.stride[a] + 1
            })
            .collect()
    }
    fn weight_shape(&self) -> Vec<usize> {
        let mut w = vec![self.filters, self.data[1] / self.groups];
        w.extend_from_slice(&self.kernel);
        w
    }
}

/// Row-major index of `at` in `dims`.
fn index(dims: &[usize], at: &[usize]) -> usize {
    dims.iter().zip(at).fold(0, |i, (&d, &a)| i * d + a)
}

/// Every multi-index of `dims`, in row-major order.
fn each(dims: &[usize]) -> Vec<Vec<usize>> {
    let mut all = vec![vec![]];
    for &d in dims {
        all = all
            .into_iter()
            .flat_map(|p| {
                (0..d).map(move |i| {
                    let mut q = p.clone();
                    q.push(i);
                    q
                })
            })
            .collect();
    }
    all
}

/// The direct sum `y[n, o, p] = b[o] + Σ_{c, k} w[o, c, k] · x[n, g·cin_g
/// + c, p·s + k·d − pad]`, as (y shape, y).
fn reference(c: &Case, x: &[f64], w: &[f64], b: Option<&[f64]>) -> (Vec<usize>, Vec<f64>) {
    let (n, cin) = (c.data[0], c.data[1]);
    let (cin_g, cout_g) = (cin / c.groups, c.filters / c.groups);
    let out = c.out_sizes();
    let mut yd = vec![n, c.filters];
    yd.extend_from_slice(&out);
    let wd = c.weight_shape();
    let mut y = vec![0.0; yd.iter().product()];
    for at in each(&yd) {
        let (img, o, pos) = (at[0], at[1], &at[2..]);
        let grp = o / cout_g;
        let mut acc = b.map_or(0.0, |b| b[o]);
        for ci in 0..cin_g {
            'taps: for k in each(&c.kernel) {
                let mut src = vec![img, grp * cin_g + ci];
                for a in 0..c.spatial() {
                    let i =
                        (pos[a] * c.stride[a] + k[a] * c.dilate[a]) as isize - c.pad[a] as isize;
                    if i < 0 || i >= c.data[2 + a] as isize {
                        continue 'taps;
                    }
                    src.push(i as usize);
                }
                let mut wi = vec![o, ci];
                wi.extend_from_slice(&k);
                acc += w[index(&wd, &wi)] * x[index(&c.data, &src)];
            }
        }
        y[index(&yd, &at)] = acc;
    }
    (yd, y)
}

/// Deterministic values in [-1, 1) on a 1/64 grid.
fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| (((i * 37 + seed * 101) % 128) as f64 - 64.0) / 64.0)
        .collect()
}

fn array(v: &[f64], shape: &[usize], dtype: DType) -> NDArray {
    NDArray::from_f64(v, shape.to_vec(), dtype).unwrap()
}

fn cases() -> Vec<Case> {
    vec![
        Case::new(&[2, 3, 9], &[3], 4),
        Case::new(&[2, 3, 11], &[5], 2)
            .stride(&[2])
            .pad(&[2])
            .dilate(&[2]),
        Case::new(&[2, 3, 6, 7], &[3, 3], 5).pad(&[1, 1]),
        Case::new(&[1, 4, 9, 8], &[2, 3], 6)
            .stride(&[2, 3])
            .pad(&[1, 0]),
        Case::new(&[2, 4, 9, 9], &[3, 3], 4)
            .dilate(&[2, 3])
            .pad(&[2, 1])
            .groups(2),
        Case::new(&[2, 3, 5, 6], &[1, 1], 4),
        Case::new(&[2, 3, 7, 6], &[1, 1], 4).stride(&[2, 2]),
        Case::new(&[1, 2, 12, 12], &[7, 7], 3)
            .stride(&[2, 2])
            .pad(&[3, 3]),
        // Depthwise, and with a channel multiplier of 2.
        Case::new(&[2, 4, 7, 8], &[3, 3], 4).pad(&[1, 1]).groups(4),
        Case::new(&[2, 3, 8, 7], &[3, 2], 6)
            .stride(&[2, 1])
            .dilate(&[1, 2])
            .groups(3),
        Case::new(&[1, 2, 9], &[3], 4)
            .pad(&[1])
            .stride(&[2])
            .groups(2),
        // Depthwise at stride 2 and 3 along rows (the phase-split input).
        Case::new(&[2, 3, 9, 9], &[3, 3], 3)
            .stride(&[2, 2])
            .pad(&[1, 1])
            .groups(3),
        Case::new(&[1, 2, 7, 10], &[3, 3], 2)
            .stride(&[1, 3])
            .pad(&[1, 2])
            .dilate(&[1, 2])
            .groups(2),
        // Rows wider than the depthwise kernel's blocks of 32 columns.
        Case::new(&[1, 2, 4, 75], &[3, 3], 2).pad(&[1, 1]).groups(2),
        Case::new(&[1, 2, 5, 80], &[3, 5], 4)
            .stride(&[2, 2])
            .pad(&[1, 2])
            .groups(2),
        Case::new(&[2, 2, 4, 5, 4], &[2, 3, 2], 3)
            .pad(&[1, 1, 0])
            .stride(&[1, 2, 1]),
        Case::new(&[1, 3, 4, 4, 5], &[3, 1, 2], 3)
            .groups(3)
            .pad(&[1, 0, 1]),
        // Padding wider than the kernel: rows of the window fall outside.
        Case::new(&[1, 1, 3, 3], &[2, 2], 1).pad(&[2, 2]),
    ]
}

fn conv_inputs(c: &Case, dtype: DType, seed: usize) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let xn = c.data.iter().product();
    let wn = c.weight_shape().iter().product();
    let round = |v: Vec<f64>| {
        // Exact in every float dtype: products stay exact too.
        let a = array(&v, &[v.len()], dtype);
        a.to_f64_vec()
    };
    (
        round(values(xn, seed)),
        round(values(wn, seed + 1)),
        round(values(c.filters, seed + 2)),
    )
}

#[test]
fn convolution_matches_the_direct_sum_in_every_dtype() {
    simpleop_ops::link();
    for (k, c) in cases().iter().enumerate() {
        for dtype in [DType::F64, DType::F32, DType::F16, DType::BF16] {
            for no_bias in [false, true] {
                let (x, w, b) = conv_inputs(c, dtype, k);
                let (yd, want) = reference(c, &x, &w, (!no_bias).then_some(&b[..]));
                let xa = array(&x, &c.data, dtype);
                let wa = array(&w, &c.weight_shape(), dtype);
                let ba = array(&b, &[c.filters], dtype);
                let mut ins = vec![&xa, &wa];
                if !no_bias {
                    ins.push(&ba);
                }
                let y = eager::invoke("Convolution", &ins, &c.attrs(no_bias)).unwrap();
                assert_eq!(y.shape().dims(), &yd[..], "{c:?}");
                assert_eq!(y.dtype(), dtype);
                let tol = match dtype {
                    DType::F64 => 1e-12,
                    DType::F32 => 1e-5,
                    _ => 1e-2,
                };
                assert_close(&y.to_f64_vec(), &want, tol, &format!("{c:?} {dtype}"));
            }
        }
    }
}

/// Each request: `add` adds onto what is there, `null` leaves it.
#[test]
fn convolution_honours_every_request() {
    simpleop_ops::link();
    let c = Case::new(&[2, 3, 6, 5], &[3, 3], 4).pad(&[1, 1]);
    let (x, w, b) = conv_inputs(&c, DType::F32, 3);
    let (yd, want) = reference(&c, &x, &w, Some(&b));
    let (xa, wa, ba) = (
        array(&x, &c.data, DType::F32),
        array(&w, &c.weight_shape(), DType::F32),
        array(&b, &[4], DType::F32),
    );
    let before = values(want.len(), 9);
    for req in [OpReqType::WriteTo, OpReqType::AddTo, OpReqType::Null] {
        let mut out = array(&before, &yd, DType::F32);
        eager::invoke_into_by_name(
            "Convolution",
            &[&xa, &wa, &ba],
            &c.attrs(false),
            &mut out,
            req,
        )
        .unwrap();
        let expect: Vec<f64> = match req {
            OpReqType::WriteTo => want.clone(),
            OpReqType::AddTo => want.iter().zip(&before).map(|(a, b)| a + b).collect(),
            _ => before.clone(),
        };
        assert_close(&out.to_f64_vec(), &expect, 1e-5, &format!("{req:?}"));
    }
}

/// Large enough that column tiles hold a few output rows each and the
/// images split over threads; depthwise too.
#[test]
fn tiled_and_threaded_convolutions_match_the_direct_sum() {
    simpleop_ops::link();
    for c in [
        Case::new(&[3, 16, 40, 44], &[3, 3], 8).pad(&[1, 1]),
        Case::new(&[1, 24, 50, 50], &[5, 5], 4)
            .stride(&[2, 2])
            .pad(&[2, 2]),
        Case::new(&[4, 16, 30, 30], &[3, 3], 16)
            .pad(&[1, 1])
            .groups(16),
        Case::new(&[3, 16, 20, 20], &[1, 1], 32),
    ] {
        let (x, w, b) = conv_inputs(&c, DType::F64, 5);
        let (yd, want) = reference(&c, &x, &w, Some(&b));
        let xa = array(&x, &c.data, DType::F64);
        let wa = array(&w, &c.weight_shape(), DType::F64);
        let ba = array(&b, &[c.filters], DType::F64);
        let y = eager::invoke("Convolution", &[&xa, &wa, &ba], &c.attrs(false)).unwrap();
        assert_eq!(y.shape().dims(), &yd[..]);
        assert_close(&y.to_f64_vec(), &want, 1e-12, &format!("{c:?}"));
    }
}

/// `Deconvolution` is the adjoint of `Convolution`: `⟨deconv(y, w), x⟩ =
/// ⟨y, conv(x, w)⟩` for every `x` and `y`, checked on basis-free random
/// pairs, with the output size MXNet gives.
#[test]
fn deconvolution_is_the_adjoint_of_convolution() {
    simpleop_ops::link();
    for (k, c) in cases().iter().enumerate() {
        let (x, w, _) = conv_inputs(c, DType::F64, k);
        let (yd, cy) = reference(c, &x, &w, None);
        let y = values(cy.len(), k + 7);
        let mut attrs = Attrs::new()
            .with("kernel", tuple(&c.kernel))
            .with("stride", tuple(&c.stride))
            .with("dilate", tuple(&c.dilate))
            .with("pad", tuple(&c.pad))
            .with("num_filter", c.data[1])
            .with("num_group", c.groups);
        // The rows a strided convolution skipped at the end come back as adj.
        let adj: Vec<usize> = (0..c.spatial())
            .map(|a| {
                let reach = c.dilate[a] * (c.kernel[a] - 1) + 1;
                (c.data[2 + a] + 2 * c.pad[a] - reach) % c.stride[a]
            })
            .collect();
        attrs = attrs.with("adj", tuple(&adj));
        // The deconvolution's weight (C, num_filter / groups, k) is the
        // convolution's (filters, cin / groups, k) read as such.
        let mut wd = vec![c.filters, c.data[1] / c.groups];
        wd.extend_from_slice(&c.kernel);
        let (ya, wa) = (array(&y, &yd, DType::F64), array(&w, &wd, DType::F64));
        let dx = eager::invoke("Deconvolution", &[&ya, &wa], &attrs).unwrap();
        assert_eq!(dx.shape().dims(), &c.data[..], "{c:?}");
        let lhs: f64 = dx.to_f64_vec().iter().zip(&x).map(|(a, b)| a * b).sum();
        let rhs: f64 = y.iter().zip(&cy).map(|(a, b)| a * b).sum();
        assert!(
            (lhs - rhs).abs() <= 1e-9 * (1.0 + rhs.abs()),
            "{c:?}: {lhs} vs {rhs}"
        );
    }
}

fn check(c: GradCheck) {
    let report = c.run().unwrap_or_else(|e| panic!("{e}"));
    assert!(report.rows.len() >= 12, "{report:?}");
    assert!(report.rows.iter().all(|r| r.2 <= 1.0), "{report:?}");
}

#[test]
fn convolution_gradients_in_every_dtype_and_request() {
    simpleop_ops::link();
    for (c, bias) in [
        (Case::new(&[2, 2, 5], &[3], 3).pad(&[1]).stride(&[2]), true),
        (
            Case::new(&[2, 2, 5, 4], &[3, 2], 2)
                .pad(&[1, 1])
                .dilate(&[1, 2]),
            true,
        ),
        (
            Case::new(&[1, 4, 5, 5], &[3, 3], 4)
                .groups(2)
                .stride(&[2, 2]),
            false,
        ),
        (
            Case::new(&[2, 3, 4, 4], &[3, 3], 6).groups(3).pad(&[1, 1]),
            true,
        ),
        (Case::new(&[2, 3, 3, 4], &[1, 1], 2), true),
        (
            Case::new(&[1, 2, 3, 4, 3], &[2, 2, 2], 2).pad(&[1, 0, 1]),
            true,
        ),
    ] {
        let mut shapes = vec![c.data.clone(), c.weight_shape()];
        if bias {
            shapes.push(vec![c.filters]);
        }
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        check(
            GradCheck::new("Convolution")
                .shapes(&refs)
                .attrs(c.attrs(!bias)),
        );
    }
}

#[test]
fn deconvolution_gradients_in_every_dtype_and_request() {
    simpleop_ops::link();
    let deconv = |data: &[usize], weight: &[usize], bias: Option<usize>, attrs: &[(&str, &str)]| {
        let mut shapes = vec![data.to_vec(), weight.to_vec()];
        let mut a = Attrs::new().with("no_bias", if bias.is_some() { "False" } else { "True" });
        if let Some(b) = bias {
            shapes.push(vec![b]);
        }
        for (k, v) in attrs {
            a = a.with(*k, *v);
        }
        let refs: Vec<&[usize]> = shapes.iter().map(Vec::as_slice).collect();
        check(GradCheck::new("Deconvolution").shapes(&refs).attrs(a));
    };
    let k2 = [
        ("kernel", "(3, 3)"),
        ("stride", "(2, 2)"),
        ("pad", "(1, 1)"),
        ("adj", "(1, 0)"),
        ("num_filter", "3"),
    ];
    deconv(&[2, 2, 3, 3], &[2, 3, 3, 3], Some(3), &k2);
    let k1 = [
        ("kernel", "(4,)"),
        ("stride", "(2,)"),
        ("num_filter", "4"),
        ("num_group", "2"),
    ];
    deconv(&[1, 2, 4], &[2, 2, 4], None, &k1);
    let dw = [
        ("kernel", "(3, 3)"),
        ("num_filter", "2"),
        ("num_group", "2"),
        ("target_shape", "(6, 5)"),
        ("stride", "(2, 2)"),
    ];
    deconv(&[2, 2, 3, 3], &[2, 1, 3, 3], Some(2), &dw);
}
