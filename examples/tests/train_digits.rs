//! A test-sized run of the `train_digits` example (its recipe: warps,
//! standardisation, dropout, label smoothing, cosine decay, on a smaller
//! model and subset): the loss falls, the model learns, and the same seed
//! gives bit-identical losses.

// The example's trainer, shared rather than copied; the example uses parts
// of it this test does not.
#[allow(dead_code)]
#[path = "../examples/train_digits/trainer.rs"]
mod trainer;

use std::path::Path;

use trainer::{
    Affine, Augment, CONV_PARAMS, Config, Dataset, MLP_PARAMS, Optimizer, PATCH, POSITIONS,
    TTA_VIEWS, Trainer, View, deskew, load_digits,
};

fn data() -> (Dataset, Dataset) {
    let all = load_digits(&Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv")).unwrap();
    assert_eq!(all.len(), 1797);
    assert_eq!(all.x.len(), 1797 * 64);
    assert!(all.x.iter().all(|&p| (0.0..=1.0).contains(&p)));
    // A subset keeps the test fast in the test profile.
    (all.slice(0..600), all.slice(1500..1797))
}

fn run(optimizer: Optimizer, lr: f64, seed: u64, epochs: usize) -> (Vec<f64>, f64) {
    run_with(Config {
        hidden: 32,
        batch: 25,
        lr,
        seed,
        optimizer,
        epochs,
        ..Config::default()
    })
}

fn run_with(config: Config) -> (Vec<f64>, f64) {
    let (train, test) = data();
    let epochs = config.epochs;
    let mut model = Trainer::new(config).unwrap();
    let mut losses = Vec::new();
    let mut steps = 0;
    for _ in 0..epochs {
        let report = model.epoch(&train, || steps += 1).unwrap();
        assert_eq!(report.step_seconds.len(), 600 / 25);
        losses.push(report.loss);
    }
    assert_eq!(steps, epochs * 24);
    (losses, model.accuracy(&test).unwrap())
}

#[test]
fn sgd_momentum_learns_and_is_deterministic() {
    let (losses, acc) = run(Optimizer::SgdMomentum, 0.1, 7, 3);
    assert!(losses[0] < 2.5, "first epoch loss {losses:?}");
    // Label smoothing puts a floor of about 0.5 under the loss.
    assert!(
        losses[2] < losses[0] * 0.7,
        "loss does not fall: {losses:?}"
    );
    assert!(acc > 0.7, "test accuracy {acc}");
    let (again, acc_again) = run(Optimizer::SgdMomentum, 0.1, 7, 3);
    // Bit for bit, not approximately.
    let bits = |v: &[f64]| v.iter().map(|l| l.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&losses), bits(&again));
    assert_eq!(acc, acc_again);
    let (other_seed, _) = run(Optimizer::SgdMomentum, 0.1, 8, 1);
    assert_ne!(other_seed[0].to_bits(), losses[0].to_bits());
}

#[test]
fn plain_recipe_learns_and_differs_from_the_augmented_one() {
    // No warps, no standardisation, no dropout, no smoothing, constant
    // learning rate: the example as it was before the recipe.
    let plain = Config {
        hidden: 32,
        batch: 25,
        lr: 0.1,
        seed: 7,
        epochs: 3,
        cosine: false,
        dropout: 0.0,
        label_smoothing: 0.0,
        augment: None,
        standardize: false,
        ..Config::default()
    };
    let (losses, acc) = run_with(plain.clone());
    assert!(
        losses[2] < losses[0] * 0.5,
        "loss does not fall: {losses:?}"
    );
    assert!(acc > 0.7, "test accuracy {acc}");
    let (warped, _) = run_with(Config {
        augment: Some(Augment::default()),
        ..plain
    });
    assert_ne!(warped[0].to_bits(), losses[0].to_bits());
}

/// The convolution is MXNet's `Convolution` op on `(batch, 1, 8, 8)`
/// images, its weight `(C, 1, 3, 3)`; the MLP alone still learns.
#[test]
fn the_model_convolves_the_images_and_the_mlp_alone_still_learns() {
    assert_eq!((POSITIONS, PATCH), (36, 9));
    let conv = Trainer::new(Config {
        hidden: 32,
        ..Config::default()
    })
    .unwrap();
    let shapes: Vec<Vec<usize>> = conv.params().map(|p| p.shape().dims().to_vec()).collect();
    assert_eq!(CONV_PARAMS, ["wc", "bc", "w1", "b1", "w2", "b2"]);
    assert_eq!(
        shapes,
        [
            vec![8, 1, 3, 3],
            vec![8],
            vec![36 * 8, 32],
            vec![32],
            vec![32, 10],
            vec![10]
        ]
    );
    let (losses, acc) = run_with(Config {
        conv_channels: 0,
        hidden: 32,
        batch: 25,
        seed: 7,
        epochs: 3,
        ..Config::default()
    });
    assert!(losses[2] < losses[0], "loss does not fall: {losses:?}");
    assert!(acc > 0.7, "test accuracy {acc}");
    let mlp = Trainer::new(Config {
        conv_channels: 0,
        ..Config::default()
    })
    .unwrap();
    assert_eq!(MLP_PARAMS, ["w1", "b1", "w2", "b2"]);
    let shapes: Vec<Vec<usize>> = mlp.params().map(|p| p.shape().dims().to_vec()).collect();
    assert_eq!(shapes, [vec![64, 128], vec![128], vec![128, 10], vec![10]]);
}

#[test]
fn adam_learns() {
    let (losses, acc) = run(Optimizer::Adam, 0.01, 3, 2);
    assert!(losses[1] < losses[0], "loss does not fall: {losses:?}");
    assert!(acc > 0.7, "test accuracy {acc}");
}

#[test]
fn bad_data_and_configs_are_errors() {
    let dir = std::env::temp_dir().join(format!("simpleop-digits-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.csv");
    std::fs::write(&bad, "label,p0\n3,1,2\n").unwrap();
    let err = load_digits(&bad).unwrap_err().to_string();
    assert!(err.contains("line 2: expected 65 fields, got 3"), "{err}");
    let row = |label: &str| format!("h\n{label}{}\n", ",1".repeat(64));
    std::fs::write(&bad, row("12")).unwrap();
    let err = load_digits(&bad).unwrap_err().to_string();
    assert!(err.contains("label 12 is not a digit"), "{err}");
    std::fs::write(&bad, row("x")).unwrap();
    assert!(load_digits(&bad).unwrap_err().to_string().contains("`x`"));
    assert!(load_digits(&dir.join("missing.csv")).is_err());
    std::fs::remove_dir_all(&dir).unwrap();

    let config = Config {
        hidden: 8,
        batch: 0,
        lr: 0.1,
        seed: 1,
        optimizer: Optimizer::SgdMomentum,
        ..Config::default()
    };
    assert!(Trainer::new(config.clone()).is_err());
    assert!(
        Trainer::new(Config {
            batch: 10,
            dropout: 1.0,
            ..config.clone()
        })
        .is_err()
    );
    let mut tiny = Trainer::new(Config {
        batch: 1000,
        ..config
    })
    .unwrap();
    let (train, _) = data();
    assert!(
        tiny.epoch(&train, || ()).is_err(),
        "600 rows < one batch of 1000"
    );
}

#[test]
fn shifts_move_whole_pixels() {
    let img: Vec<f32> = (0..64).map(|v| v as f32).collect();
    let mut out = vec![0.0f32; 64];
    Affine::shift(1.0, 0.0).apply(&img, &mut out);
    assert_eq!(&out[..8], &[0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
    Affine::shift(0.0, -1.0).apply(&img, &mut out);
    assert_eq!(&out[..8], &img[8..16]);
    assert_eq!(&out[56..], &[0.0; 8]);
    Affine::IDENTITY.apply(&img, &mut out);
    assert_eq!(out, img);
}

/// The ink-weighted covariance of x and y over an 8×8 image.
fn slant(img: &[f32]) -> f64 {
    let m: f64 = img.iter().map(|&v| f64::from(v)).sum();
    let at = |k: usize| ((k % 8) as f64, (k / 8) as f64);
    let (cx, cy) = img.iter().enumerate().fold((0.0, 0.0), |(x, y), (k, &v)| {
        (
            x + f64::from(v) * at(k).0 / m,
            y + f64::from(v) * at(k).1 / m,
        )
    });
    img.iter()
        .enumerate()
        .map(|(k, &v)| f64::from(v) * (at(k).0 - cx) * (at(k).1 - cy) / m)
        .sum()
}

#[test]
fn deskew_straightens_a_slanted_stroke() {
    // An upright bar has no slant and is copied as it is.
    let mut bar = vec![0.0f32; 64];
    for y in 1..7 {
        bar[y * 8 + 3] = 1.0;
    }
    let mut out = vec![0.0f32; 64];
    deskew(&bar, &mut out);
    assert_eq!(out, bar);
    // A stroke leaning right (x grows as y falls) loses most of its slant.
    let mut leaning = vec![0.0f32; 64];
    for y in 0..8 {
        leaning[y * 8 + (7 - y) / 2 + 2] = 1.0;
    }
    deskew(&leaning, &mut out);
    assert!(slant(&leaning) < -0.5, "{}", slant(&leaning));
    assert!(
        slant(&out).abs() < 0.1 * slant(&leaning).abs(),
        "{}",
        slant(&out)
    );
    // A blank image stays blank; a deskewed view then shifted is the
    // deskewed image shifted.
    let blank = vec![0.0f32; 64];
    deskew(&blank, &mut out);
    assert_eq!(out, blank);
    let mut straight = vec![0.0f32; 64];
    deskew(&leaning, &mut straight);
    let mut shifted = vec![0.0f32; 64];
    Affine::shift(1.0, 0.0).apply(&straight, &mut shifted);
    View::deskewed(Affine::shift(1.0, 0.0)).apply(&leaning, &mut out);
    assert_eq!(out, shifted);
}

#[test]
fn test_time_augmentation_and_weight_averaging() {
    let config = Config {
        hidden: 32,
        batch: 25,
        seed: 7,
        epochs: 2,
        average_last: 0.0,
        ..Config::default()
    };
    let (train, test) = data();
    let train_and_score = |config: Config| {
        let mut model = Trainer::new(config).unwrap();
        for _ in 0..2 {
            model.epoch(&train, || ()).unwrap();
        }
        let plain = model.accuracy(&test).unwrap();
        let one_view = model.accuracy_tta(&test, &[View::IDENTITY]).unwrap();
        let probs = model.probabilities_tta(&test, &TTA_VIEWS).unwrap();
        (plain, one_view, probs)
    };
    let (plain, one_view, probs) = train_and_score(config.clone());
    assert_eq!(plain, one_view);
    assert!(plain > 0.6, "test accuracy {plain}");
    for row in probs.chunks_exact(10) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-4);
    }
    let (_, _, again) = train_and_score(config.clone());
    assert_eq!(probs, again);
    // Averaging both epochs' weights changes the evaluated model.
    let (_, _, averaged) = train_and_score(Config {
        average_last: 1.0,
        ..config
    });
    assert_ne!(probs, averaged);
}

/// `--eager`: the same model trained by eager calls under
/// `autograd::record` gives the graph's losses and accuracy, bit for bit
/// (the same kernels in the same order on the same draws).
#[test]
fn the_eager_loop_trains_the_graphs_model_exactly() {
    let config = Config {
        hidden: 32,
        batch: 25,
        epochs: 2,
        ..Config::default()
    };
    let (losses, accuracy) = run_with(config.clone());
    let eager = run_with(Config {
        eager: true,
        ..config
    });
    assert_eq!(eager, (losses, accuracy));
}
