//! The gradient checker on `Pooling`, `UpSampling` and `Pad`: every float
//! dtype and every `OpReqType`, against central differences of the
//! forward pass. Max pooling gets distinct inputs (no ties, and gaps wider
//! than the checker's step), Lp pooling positive ones (away from `y = 0`).

use simpleop::gradcheck::GradCheck;

fn check(c: GradCheck) {
    simpleop_ops::link();
    let report = c.run().unwrap_or_else(|e| panic!("{e}"));
    // Three requests per float dtype at least.
    assert!(report.rows.len() >= 12, "{report:?}");
    assert!(report.rows.iter().all(|r| r.2 <= 1.0), "{report:?}");
}

/// `n` distinct values 0.25 apart, shuffled by a fixed stride.
fn distinct(n: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 7) % n) as f64 * 0.25 - n as f64 / 8.0)
        .collect()
}

fn pool(shape: &[usize], attrs: &[(&str, &str)]) -> GradCheck {
    let mut c = GradCheck::new("Pooling").shapes(&[shape]);
    for (k, v) in attrs {
        c = c.attr(k, v);
    }
    c
}

#[test]
fn max_pooling_valid_full_padded_global_and_3d() {
    let s = [1, 2, 5, 5];
    let x = || vec![distinct(50)];
    check(pool(&s, &[("kernel", "(2, 2)"), ("stride", "(2, 2)")]).inputs(x()));
    let full = [
        ("kernel", "(3, 3)"),
        ("stride", "(2, 2)"),
        ("pad", "(1, 1)"),
        ("pooling_convention", "full"),
    ];
    check(pool(&s, &full).inputs(x()));
    check(pool(&s, &[("kernel", "(1, 1)"), ("global_pool", "True")]).inputs(x()));
    check(
        pool(
            &[2, 2, 7],
            &[("kernel", "(3,)"), ("stride", "(2,)"), ("pad", "(1,)")],
        )
        .inputs(vec![distinct(28)]),
    );
    check(
        pool(
            &[1, 1, 3, 4, 3],
            &[("kernel", "(2, 2, 2)"), ("pad", "(1, 0, 1)")],
        )
        .inputs(vec![distinct(36)]),
    );
}

#[test]
fn avg_and_sum_pooling_with_and_without_the_padding() {
    let s = [2, 2, 5, 4];
    for incl in ["True", "False"] {
        for conv in ["valid", "full"] {
            let a = [
                ("kernel", "(3, 3)"),
                ("stride", "(2, 2)"),
                ("pad", "(1, 1)"),
                ("pool_type", "avg"),
                ("pooling_convention", conv),
                ("count_include_pad", incl),
            ];
            check(pool(&s, &a));
        }
    }
    check(pool(
        &s,
        &[
            ("kernel", "(2, 3)"),
            ("pad", "(1, 1)"),
            ("pool_type", "sum"),
        ],
    ));
    check(pool(
        &[2, 3, 9],
        &[
            ("kernel", "(4,)"),
            ("stride", "(3,)"),
            ("pool_type", "avg"),
            ("pooling_convention", "same"),
        ],
    ));
    check(pool(
        &s,
        &[
            ("kernel", "(1, 1)"),
            ("pool_type", "avg"),
            ("global_pool", "True"),
        ],
    ));
}

#[test]
fn lp_pooling_for_each_p() {
    for p in ["1", "2", "3"] {
        let a = [
            ("kernel", "(2, 2)"),
            ("stride", "(1, 2)"),
            ("pad", "(1, 0)"),
            ("pool_type", "lp"),
            ("p_value", p),
        ];
        check(pool(&[1, 2, 4, 4], &a).range(0.5, 2.0));
    }
}

#[test]
fn upsampling_nearest_one_input_and_several() {
    check(
        GradCheck::new("UpSampling")
            .attr("scale", 2)
            .attr("sample_type", "nearest")
            .shapes(&[&[2, 2, 2, 3]]),
    );
    check(
        GradCheck::new("UpSampling")
            .attr("scale", 3)
            .attr("sample_type", "nearest")
            .shapes(&[&[1, 1, 2, 2]]),
    );
    for mode in ["concat", "sum"] {
        check(
            GradCheck::new("UpSampling")
                .attr("scale", 2)
                .attr("sample_type", "nearest")
                .attr("num_args", 2)
                .attr("multi_input_mode", mode)
                .shapes(&[&[1, 2, 2, 2], &[1, 2, 1, 1]]),
        );
    }
}

#[test]
fn pad_in_each_mode_4d_and_5d() {
    for mode in ["constant", "edge", "reflect"] {
        let pad = |shape: &[usize], w: &str| {
            GradCheck::new("Pad")
                .attr("mode", mode)
                .attr("pad_width", w)
                .attr("constant_value", 0.5)
                .shapes(&[shape])
        };
        check(pad(&[2, 2, 3, 4], "(0, 0, 0, 0, 2, 1, 1, 3)"));
        check(pad(&[1, 2, 3, 2, 3], "(0, 0, 0, 0, 1, 2, 1, 1, 2, 0)"));
    }
}
