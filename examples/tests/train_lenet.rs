//! The `train_lenet` example's model: it learns, and what it saves as
//! `-symbol.json` and `.params` loads back into a fresh executor with
//! every weight and moving statistic bit for bit, predicting the same.

#[path = "../examples/train_lenet/lenet.rs"]
mod lenet;

use std::collections::HashMap;

#[test]
fn lenet_learns_saves_and_reloads_bit_for_bit() {
    simpleop_ops::link();
    let data =
        lenet::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("data/digits.csv"))
            .unwrap();
    let (train, test) = (data.slice(0, 600), data.slice(1500, data.rows()));
    let sym = lenet::model().unwrap();
    let mut exe = lenet::bind(&sym, 50, true).unwrap();
    lenet::initialize(&mut exe, 7).unwrap();
    let mut mom = HashMap::new();
    for _ in 0..3 {
        lenet::train_epoch(&mut exe, &train, 50, 0.05, &mut mom).unwrap();
    }
    // BatchNorm's moving statistics moved away from their start.
    let var = exe
        .aux("c1_bn_moving_var")
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(var.iter().any(|&v| v != 1.0), "{var:?}");

    let dir = std::env::temp_dir().join(format!("simpleop-lenet-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let stem = dir.join("lenet");
    lenet::save(&exe, &sym, &stem).unwrap();
    let mut reloaded = lenet::load_model(&stem, test.rows()).unwrap();
    for (name, saved) in exe.params(&lenet::INPUTS) {
        let key = name.split_once(':').map_or(name.as_str(), |(_, k)| k);
        let back = reloaded.arg(key).or_else(|| reloaded.aux(key)).unwrap();
        assert_eq!(
            back.to_vec::<f32>().unwrap(),
            saved.to_vec::<f32>().unwrap(),
            "{name}"
        );
    }
    let mut trained = lenet::bind(&sym, test.rows(), false).unwrap();
    let options = simpleop::params::LoadOptions {
        inputs: &lenet::INPUTS,
        ..Default::default()
    };
    trained
        .load_params(&exe.params(&lenet::INPUTS), &options)
        .unwrap();
    let before = lenet::predict(&mut trained, &test).unwrap();
    let after = lenet::predict(&mut reloaded, &test).unwrap();
    assert_eq!(before, after);
    let acc = lenet::accuracy(&before, &test);
    assert!(acc > 0.6, "test accuracy {acc}");
    std::fs::remove_dir_all(&dir).unwrap();
}
