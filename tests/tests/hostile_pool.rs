//! Hostile inputs to `Pooling`, `UpSampling` and `Pad`: every bad kwarg,
//! shape, dtype and buffer is an `Err` naming the op and the argument (and
//! what was expected), on the eager path, in shape inference and in the
//! backward pass; never a panic.

use simpleop::{Attrs, DType, NDArray, OpReqType, eager};

use simpleop_tests::hostile::{attrs, refused};

const HUGE: &str = "1099511627776";

#[test]
fn pooling_kernels_strides_and_pads_that_cannot_work() {
    let s: &[&[usize]] = &[&[1, 1, 4, 4]];
    refused("Pooling", s, &[], &["kernel", "required"]);
    refused("Pooling", s, &[("kernel", "(0, 2)")], &["kernel"]);
    refused("Pooling", s, &[("kernel", "(-1, 2)")], &["kernel"]);
    refused(
        "Pooling",
        s,
        &[("kernel", "(5, 2)")],
        &["kernel", "exceeds"],
    );
    refused(
        "Pooling",
        s,
        &[("kernel", "(5, 2)"), ("pad", "(0, 0)")],
        &["kernel"],
    );
    refused(
        "Pooling",
        s,
        &[("kernel", &format!("({HUGE}, 2)"))],
        &["kernel"],
    );
    refused(
        "Pooling",
        s,
        &[("kernel", "(2, 2)"), ("stride", "(0, 1)")],
        &["stride"],
    );
    refused(
        "Pooling",
        s,
        &[("kernel", "(2, 2)"), ("stride", &format!("({HUGE}, 1)"))],
        &["stride"],
    );
    refused(
        "Pooling",
        s,
        &[("kernel", "(2, 2)"), ("stride", "(1, 1, 1)")],
        &["stride", "entries"],
    );
    refused(
        "Pooling",
        s,
        &[("kernel", "(2, 2)"), ("pad", "(-1, 0)")],
        &["pad"],
    );
    refused(
        "Pooling",
        s,
        &[("kernel", "(2, 2)"), ("pad", "(1,)")],
        &["pad"],
    );
    refused(
        "Pooling",
        s,
        &[("kernel", "(2, 2)"), ("pad", &format!("({HUGE}, 0)"))],
        &["pad"],
    );
}

#[test]
fn pooling_kinds_conventions_layouts_and_ranks_that_do_not_exist() {
    let s: &[&[usize]] = &[&[1, 1, 4, 4]];
    let k = ("kernel", "(2, 2)");
    refused("Pooling", s, &[k, ("pool_type", "median")], &["pool_type"]);
    refused("Pooling", s, &[k, ("pool_type", "lp")], &["p_value"]);
    refused(
        "Pooling",
        s,
        &[k, ("pool_type", "lp"), ("p_value", "4")],
        &["p_value"],
    );
    refused(
        "Pooling",
        s,
        &[k, ("pool_type", "lp"), ("p_value", "0")],
        &["p_value"],
    );
    refused(
        "Pooling",
        s,
        &[k, ("pooling_convention", "round")],
        &["pooling_convention"],
    );
    refused(
        "Pooling",
        s,
        &[k, ("pooling_convention", "same")],
        &["data", "same"],
    );
    refused(
        "Pooling",
        &[&[1, 1, 6]],
        &[
            ("kernel", "(2,)"),
            ("pooling_convention", "same"),
            ("pad", "(1,)"),
        ],
        &["pad"],
    );
    refused("Pooling", s, &[k, ("layout", "NHWC")], &["layout", "NCHW"]);
    refused("Pooling", s, &[k, ("layout", "NCW")], &["layout"]);
    refused("Pooling", s, &[("kernel", "(2,)")], &["data", "kernel"]);
    refused("Pooling", &[&[4, 4]], &[k], &["data", "3-D"]);
    refused(
        "Pooling",
        &[&[1, 1, 1, 1, 1, 1]],
        &[("global_pool", "True")],
        &["data"],
    );
    refused(
        "Pooling",
        &[&[0, 1, 1 << 31]],
        &[("kernel", "(1,)")],
        &["data", "2^31"],
    );
}

#[test]
fn upsampling_bad_kwargs_and_inputs() {
    let s: &[&[usize]] = &[&[1, 2, 2, 2]];
    refused(
        "UpSampling",
        s,
        &[("scale", "2"), ("sample_type", "bilinear")],
        &["sample_type", "bilinear"],
    );
    let data_weight: &[&[usize]] = &[&[1, 2, 2, 2], &[2, 1, 4, 4]];
    refused(
        "UpSampling",
        data_weight,
        &[
            ("scale", "2"),
            ("sample_type", "bilinear"),
            ("num_args", "2"),
        ],
        &["sample_type"],
    );
    refused("UpSampling", s, &[("scale", "2")], &["sample_type"]);
    refused(
        "UpSampling",
        s,
        &[("scale", "2"), ("sample_type", "cubic")],
        &["sample_type"],
    );
    refused(
        "UpSampling",
        s,
        &[("scale", "0"), ("sample_type", "nearest")],
        &["scale"],
    );
    refused(
        "UpSampling",
        s,
        &[("scale", HUGE), ("sample_type", "nearest")],
        &["scale"],
    );
    refused(
        "UpSampling",
        &[&[1, 2, 1 << 20, 1]],
        &[("scale", "4096"), ("sample_type", "nearest")],
        &["scale"],
    );
    refused(
        "UpSampling",
        s,
        &[
            ("scale", "2"),
            ("sample_type", "nearest"),
            ("multi_input_mode", "max"),
        ],
        &["multi_input_mode"],
    );
    refused(
        "UpSampling",
        &[&[2, 2, 2]],
        &[("scale", "2"), ("sample_type", "nearest")],
        &["arg0", "4-D"],
    );
    refused(
        "UpSampling",
        &[&[1, 2, 0, 2]],
        &[("scale", "2"), ("sample_type", "nearest")],
        &["arg0"],
    );
    let two = |extra: &[(&'static str, &'static str)]| {
        let mut kv = vec![
            ("scale", "2"),
            ("sample_type", "nearest"),
            ("num_args", "2"),
        ];
        kv.extend_from_slice(extra);
        kv
    };
    // 4×4 output: 3 does not divide it; 2×1 needs factors 2 and 4; batch 2 ≠ 1.
    refused(
        "UpSampling",
        &[&[1, 2, 2, 2], &[1, 1, 3, 3]],
        &two(&[]),
        &["arg1"],
    );
    refused(
        "UpSampling",
        &[&[1, 2, 2, 2], &[1, 1, 2, 1]],
        &two(&[]),
        &["arg1"],
    );
    refused(
        "UpSampling",
        &[&[1, 2, 2, 2], &[2, 2, 2, 2]],
        &two(&[]),
        &["arg1", "batch"],
    );
    refused(
        "UpSampling",
        &[&[1, 2, 2, 2], &[1, 3, 2, 2]],
        &two(&[("multi_input_mode", "sum")]),
        &["arg1", "channels"],
    );
}

#[test]
fn pad_widths_modes_and_ranks_that_cannot_work() {
    let s: &[&[usize]] = &[&[1, 1, 3, 3]];
    refused(
        "Pad",
        s,
        &[("mode", "constant")],
        &["pad_width", "8 entries"],
    );
    refused(
        "Pad",
        s,
        &[("pad_width", "(0, 0, 0, 0, 1, 1)")],
        &["pad_width", "8 entries"],
    );
    refused(
        "Pad",
        s,
        &[("pad_width", "(0, 0, 0, 0, 1, 1, 1, 1, 1, 1)")],
        &["pad_width"],
    );
    refused(
        "Pad",
        s,
        &[("pad_width", "(0, 0, 1, 0, 1, 1, 1, 1)")],
        &["pad_width", "first four"],
    );
    refused(
        "Pad",
        s,
        &[("pad_width", "(0, 0, 0, 0, -1, 1, 1, 1)")],
        &["pad_width"],
    );
    refused(
        "Pad",
        s,
        &[("pad_width", &format!("(0, 0, 0, 0, {HUGE}, 1, 1, 1)"))],
        &["pad_width"],
    );
    refused(
        "Pad",
        &[&[1, 1, 3]],
        &[("pad_width", "(0, 0, 0, 0, 1, 1)")],
        &["data", "4-D"],
    );
    refused(
        "Pad",
        s,
        &[("mode", "wrap"), ("pad_width", "(0, 0, 0, 0, 1, 1, 1, 1)")],
        &["mode"],
    );
    refused(
        "Pad",
        s,
        &[
            ("mode", "reflect"),
            ("pad_width", "(0, 0, 0, 0, 3, 1, 1, 1)"),
        ],
        &["pad_width", "smaller"],
    );
    refused(
        "Pad",
        &[&[1, 1, 3, 3, 2]],
        &[
            ("mode", "reflect"),
            ("pad_width", "(0, 0, 0, 0, 1, 1, 1, 1, 0, 2)"),
        ],
        &["pad_width"],
    );
    refused(
        "Pad",
        &[&[1, 1, 0, 3]],
        &[("mode", "edge"), ("pad_width", "(0, 0, 0, 0, 1, 1, 1, 1)")],
        &["data", "edge"],
    );
}

/// Integer data, and backward with gradient buffers or an output gradient
/// of the wrong shape, are errors naming the argument.
#[test]
fn wrong_dtypes_and_gradient_buffers_are_errors() {
    simpleop_ops::link();
    let cases: [(&str, Attrs, [usize; 4], [usize; 4]); 3] = [
        (
            "Pooling",
            attrs(&[("kernel", "(2, 2)")]),
            [1, 1, 4, 4],
            [1, 1, 3, 3],
        ),
        (
            "UpSampling",
            attrs(&[("scale", "2"), ("sample_type", "nearest")]),
            [1, 1, 2, 2],
            [1, 1, 4, 4],
        ),
        (
            "Pad",
            attrs(&[("pad_width", "(0, 0, 0, 0, 1, 0, 0, 1)")]),
            [1, 1, 2, 2],
            [1, 1, 3, 3],
        ),
    ];
    for (op, a, xs, ys) in cases {
        let xi = NDArray::zeros(xs, DType::I32);
        let err = eager::invoke(op, &[&xi], &a).unwrap_err().to_string();
        assert!(err.contains(op), "{op}: {err}");
        let entry = eager::lookup(op).unwrap();
        let env = (entry.def.parse)(entry.def, &a).unwrap();
        let x = NDArray::ones(xs, DType::F32);
        let good_dy = NDArray::ones(ys, DType::F32);
        let bad_dy = NDArray::ones(xs, DType::F32);
        let mut grads = vec![NDArray::zeros(xs, DType::F32)];
        let reqs = [OpReqType::WriteTo];
        let r = eager::invoke_backward(
            entry.def,
            &env,
            &bad_dy,
            Some(&good_dy),
            &[&x],
            &mut grads,
            &reqs,
        );
        assert!(r.is_err(), "{op}: an out_grad of the input's shape");
        let mut short = vec![NDArray::zeros([1, 1, 1, 1], DType::F32)];
        let r = eager::invoke_backward(
            entry.def,
            &env,
            &good_dy,
            Some(&good_dy),
            &[&x],
            &mut short,
            &reqs,
        );
        assert!(r.is_err(), "{op}: a gradient buffer of the wrong shape");
    }
}
