//! The MPI tests: this binary is both the harness (run by `cargo test`)
//! and the program it launches under `mpirun -np 2` and `-np 3`.
//!
//! - data-parallel gradients and weights equal one process's with the
//!   large batch, within the documented tolerance, on the executor and on
//!   the eager tape;
//! - the gradients reduced from backward's gradient-ready hook (overlap)
//!   equal those reduced after backward bit for bit, at every step and in
//!   the final weights, and the reducer takes gradients in any order (a
//!   different one on every rank);
//! - checkpoint + resume gives bit for bit the weights of an uninterrupted
//!   run;
//! - a killed or hung rank makes the others exit non-zero with an error
//!   naming it, within the timeout plus slack.
//!
//! Without `mpirun` on the PATH every case is skipped with the reason.
//! Open MPI refuses to run as root unless `OMPI_ALLOW_RUN_AS_ROOT=1` and
//! `OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1`; the harness sets both.

mod model;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use model::{Model, NAMES, batch, data};
use simpleop::NDArray;
use simpleop_dist::{Checkpointer, Dist, DistConfig, GradReducer, Remainder, ShardedSampler};

/// The documented tolerance: each gradient and weight tensor of N ranks
/// with batch B is within this much, relative to the tensor's largest
/// magnitude, of one process's with batch N·B (docs/distributed.md).
const TOLERANCE: f32 = 1e-5;
const ROWS: usize = 100;
const SEED: u64 = 11;
const LR: f64 = 0.1;

/// A worker's settings, from `--key value` arguments.
#[derive(Debug, Default)]
struct Args {
    steps: u64,
    batch: usize,
    eager: bool,
    compare: bool,
    ckpt: Option<PathBuf>,
    ckpt_every: u64,
    stop_after: Option<u64>,
    out: Option<PathBuf>,
    fail: Option<(String, i32, u64)>,
    bucket_bytes: Option<usize>,
    overlap: bool,
    check_overlap: bool,
    reducer_order: bool,
}

fn parse(args: &[String]) -> Result<Args, String> {
    let mut a = Args {
        steps: 8,
        batch: 4,
        ..Args::default()
    };
    let mut it = args.iter();
    while let Some(key) = it.next() {
        let mut value = || it.next().cloned().ok_or(format!("{key} needs a value"));
        let num = |v: String| v.parse::<u64>().map_err(|e| format!("{key}: {e}"));
        match key.as_str() {
            "--steps" => a.steps = num(value()?)?,
            "--batch" => a.batch = num(value()?)? as usize,
            "--eager" => a.eager = true,
            "--compare" => a.compare = true,
            "--ckpt" => a.ckpt = Some(value()?.into()),
            "--ckpt-every" => a.ckpt_every = num(value()?)?,
            "--stop-after" => a.stop_after = Some(num(value()?)?),
            "--out" => a.out = Some(value()?.into()),
            "--bucket-bytes" => a.bucket_bytes = Some(num(value()?)? as usize),
            "--overlap" => a.overlap = true,
            "--check-overlap" => a.check_overlap = true,
            "--reducer-order" => a.reducer_order = true,
            "--fail" => {
                let v = value()?;
                let parts: Vec<&str> = v.split(':').collect();
                let [how, rank, step] = parts[..] else {
                    return Err("--fail takes kill|hang:RANK:STEP".into());
                };
                let rank = rank.parse().map_err(|e| format!("--fail rank: {e}"))?;
                a.fail = Some((how.into(), rank, num(step.into())?));
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Worst `|a − b| / max|b|` over the tensors.
fn rel_diff(a: &[NDArray], b: &[NDArray], scale_b: f32) -> Result<f32, Box<dyn std::error::Error>> {
    let mut worst = 0.0f32;
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (x.as_slice::<f32>()?, y.as_slice::<f32>()?);
        let top = y
            .iter()
            .fold(0.0f32, |m, v| m.max((v * scale_b).abs()))
            .max(f32::MIN_POSITIVE);
        let diff = x
            .iter()
            .zip(y)
            .fold(0.0f32, |m, (p, q)| m.max((p - q * scale_b).abs()));
        worst = worst.max(diff / top);
    }
    Ok(worst)
}

/// Writes `line` to stderr in one call, so ranks' lines never interleave.
fn err_line(line: &str) {
    let _ = std::io::stderr().write_all(format!("{line}\n").as_bytes());
}

/// Rank `fail.1` dies or hangs at step `fail.2`, before its all-reduce.
fn inject(fail: &Option<(String, i32, u64)>, rank: i32, step: u64) {
    let Some((how, r, s)) = fail else { return };
    if (*r, *s) != (rank, step) {
        return;
    }
    err_line(&format!(
        "rank {rank}: injected failure `{how}` at step {step}"
    ));
    if how == "kill" {
        let pid = std::process::id().to_string();
        let _ = Command::new("kill").args(["-9", &pid]).status();
    }
    loop {
        std::thread::sleep(Duration::from_secs(3600));
    }
}

fn worker(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let a = parse(args)?;
    let mut config = DistConfig::from_env()?;
    if let Some(b) = a.bucket_bytes {
        config.bucket_bytes = b;
    }
    let mut dist = Dist::init(config)?;
    let result = match a.reducer_order {
        true => reducer_order(&mut dist),
        false => train(&mut dist, &a),
    };
    if let Err(e) = &result {
        err_line(&format!("rank {}: {e}", dist.rank()));
    }
    result
}

fn train(dist: &mut Dist, a: &Args) -> Result<(), Box<dyn std::error::Error>> {
    let (rank, size) = (dist.rank(), dist.size() as usize);
    let (x, y) = data(ROWS, SEED);
    let sampler = ShardedSampler::new(
        ROWS,
        a.batch,
        rank as usize,
        size,
        SEED,
        Remainder::DropLast,
    )?;
    let whole = ShardedSampler::new(ROWS, a.batch * size, 0, 1, SEED, Remainder::DropLast)?;
    // Different weights on every rank: the broadcast must make them equal.
    let mut model = Model::new(a.batch, 100 + rank as u64, a.eager)?;
    let ckpt = a.ckpt.as_ref().map(|d| Checkpointer::new(d, 2));
    let mut start = 0;
    match ckpt.as_ref().map(|c| c.resume(dist)).transpose()?.flatten() {
        Some(c) => {
            let get = |prefix: &str| -> Result<Vec<NDArray>, simpleop_dist::DistError> {
                NAMES
                    .iter()
                    .map(|n| c.get(&format!("{prefix}:{n}")).cloned())
                    .collect()
            };
            model.load(&get("param")?, Some(&get("mom")?))?;
            start = c.step;
            if rank == 0 {
                println!("resumed at step {} (epoch {})", c.step, c.epoch);
            }
        }
        None => {
            let mut params = model.params()?;
            dist.broadcast(&mut params.iter_mut().collect::<Vec<_>>())?;
            model.load(&params, None)?;
        }
    }
    // Rank 0 also trains alone with the large batch, from the same start.
    let mut reference = match a.compare && rank == 0 {
        true => {
            let mut m = Model::new(a.batch * size, 0, a.eager)?;
            m.load(&model.params()?, Some(&model.momentum()))?;
            Some(m)
        }
        false => None,
    };
    let mut reducer = GradReducer::new(dist.config().bucket_bytes);
    let mut worst_grad = 0.0f32;
    let spe = sampler.steps_per_epoch() as u64;
    for step in start..a.steps {
        let (epoch, k) = (step / spe, (step % spe) as usize);
        let rows = &sampler.batches(epoch)[k];
        let (bx, bt) = batch(&x, &y, rows)?;
        let mean = match a.overlap {
            true => overlapped_step(dist, &mut model, &mut reducer, (&bx, &bt), a, step)?,
            false => {
                let (_, grads) = model.gradients(&bx, &bt, None)?;
                inject(&a.fail, rank, step);
                reducer
                    .allreduce_mean(dist, &grads.iter().collect::<Vec<_>>())?
                    .to_vec()
            }
        };
        if let Some(r) = reference.as_mut() {
            let (bx, bt) = batch(&x, &y, &whole.batches(epoch)[k])?;
            let (_, big) = r.gradients(&bx, &bt, None)?;
            worst_grad = worst_grad.max(rel_diff(&mean, &big, 1.0 / size as f32)?);
            r.update(&big, LR, 1.0 / (a.batch * size) as f64)?;
        }
        model.update(&mean, LR, 1.0 / a.batch as f64)?;
        let done = step + 1;
        if let Some(c) = &ckpt
            && a.ckpt_every > 0
            && done % a.ckpt_every == 0
        {
            let (params, mom) = (model.params()?, model.momentum());
            let names: Vec<(String, &NDArray)> = NAMES
                .iter()
                .zip(&params)
                .map(|(n, p)| (format!("param:{n}"), p))
                .chain(NAMES.iter().zip(&mom).map(|(n, m)| (format!("mom:{n}"), m)))
                .collect();
            let refs: Vec<(&str, &NDArray)> = names.iter().map(|(n, a)| (n.as_str(), *a)).collect();
            c.save(dist, done, done / spe, &refs)?;
        }
        if a.stop_after == Some(done) {
            return Ok(());
        }
    }
    report(
        dist,
        a,
        &model,
        reference.as_ref(),
        worst_grad,
        reducer.buckets().len(),
    )
}

/// One step's mean gradients, reduced from backward's gradient-ready
/// hook; with `--check-overlap` also reduced again after backward, by
/// another reducer, and compared bit for bit.
fn overlapped_step(
    dist: &mut Dist,
    model: &mut Model,
    reducer: &mut GradReducer,
    (bx, bt): (&NDArray, &NDArray),
    a: &Args,
    step: u64,
) -> Result<Vec<NDArray>, Box<dyn std::error::Error>> {
    reducer.begin(dist, &model.grads()?.iter().collect::<Vec<_>>())?;
    let mut failed = None;
    let result = model.gradients(
        bx,
        bt,
        Some(&mut |k, g| {
            reducer.ready(dist, k, g).map_err(|e| {
                let text = e.to_string();
                failed = Some(e);
                simpleop::Error::invalid("mpi test", "GradReducer::ready", text)
            })
        }),
    );
    if let Some(e) = failed {
        return Err(e.into());
    }
    let (_, grads) = result?;
    inject(&a.fail, dist.rank(), step);
    let mean = reducer.finish(dist)?.to_vec();
    if a.check_overlap {
        let mut again = GradReducer::new(dist.config().bucket_bytes);
        let after = again.allreduce_mean(dist, &grads.iter().collect::<Vec<_>>())?;
        for (k, (x, y)) in mean.iter().zip(after).enumerate() {
            if x.as_slice::<f32>()? != y.as_slice::<f32>()? {
                return Err(format!(
                    "step {step}: grads[{k}] reduced during backward differs from after it"
                )
                .into());
            }
        }
    }
    Ok(mean)
}

/// The reducer with small buckets, gradients given in a different order
/// on every rank and round: the means equal `allreduce_mean`'s bit for
/// bit; a gradient given twice, or missing at `finish`, is an error
/// naming it.
fn reducer_order(dist: &mut Dist) -> Result<(), Box<dyn std::error::Error>> {
    let rank = dist.rank();
    let sizes = [5usize, 1, 17, 3, 64, 2, 9];
    let grads: Vec<NDArray> = sizes
        .iter()
        .enumerate()
        .map(|(k, &n)| {
            let v = (0..n)
                .map(|i| ((rank + 1) as f32 * 0.37 + k as f32) / (i as f32 + 3.0))
                .collect();
            NDArray::from_vec(v, [n])
        })
        .collect::<simpleop::Result<_>>()?;
    let refs: Vec<&NDArray> = grads.iter().collect();
    let mut plain = GradReducer::new(16);
    let want = plain.allreduce_mean(dist, &refs)?.to_vec();
    let mut any = GradReducer::new(16);
    for round in 0..4u64 {
        let mut order: Vec<usize> = (0..sizes.len()).collect();
        // A rank- and round-dependent shuffle (Fisher–Yates, an LCG).
        let mut s = 0x9e37_79b9_u64 ^ (rank as u64 * 7919 + round);
        for i in (1..order.len()).rev() {
            s = s
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            order.swap(i, (s >> 33) as usize % (i + 1));
        }
        any.begin(dist, &refs)?;
        let (last, first) = (order[order.len() - 1], &order[..order.len() - 1]);
        for &k in first {
            any.ready(dist, k, &grads[k])?;
        }
        let twice = any.ready(dist, first[0], &grads[first[0]]).unwrap_err();
        let name = format!("grads[{}]", first[0]);
        if !twice.to_string().contains(&name) {
            return Err(format!("ready twice: `{twice}` does not name {name}").into());
        }
        let early = any.finish(dist).unwrap_err();
        if !early.to_string().contains(&format!("grads[{last}]")) {
            return Err(format!("finish early: `{early}` does not name grads[{last}]").into());
        }
        any.ready(dist, last, &grads[last])?;
        let got = any.finish(dist)?;
        for (k, (x, y)) in got.iter().zip(&want).enumerate() {
            if x.as_slice::<f32>()? != y.as_slice::<f32>()? {
                return Err(format!("round {round} order {order:?}: grads[{k}] differs").into());
            }
        }
    }
    if rank == 0 {
        println!(
            "{} buckets, orders differ per rank: OK",
            plain.buckets().len()
        );
    }
    Ok(())
}

/// Rank 0 checks the weights against the reference and writes them.
fn report(
    dist: &Dist,
    a: &Args,
    model: &Model,
    reference: Option<&Model>,
    worst_grad: f32,
    buckets: usize,
) -> Result<(), Box<dyn std::error::Error>> {
    if dist.rank() != 0 {
        return Ok(());
    }
    if let Some(r) = reference {
        let worst_weight = rel_diff(&model.params()?, &r.params()?, 1.0)?;
        println!(
            "ranks {} batch {} eager {} buckets {buckets}: worst relative difference: gradients {worst_grad:.3e}, weights after {} steps {worst_weight:.3e}",
            dist.size(),
            a.batch,
            a.eager,
            a.steps
        );
        if worst_grad > TOLERANCE || worst_weight > TOLERANCE {
            return Err(format!("beyond the tolerance {TOLERANCE:e}").into());
        }
    }
    if let Some(out) = &a.out {
        let params = model.params()?;
        let entries: Vec<(&str, &NDArray)> = NAMES.iter().copied().zip(&params).collect();
        NDArray::save_params(out, &entries)?;
    }
    println!("OK");
    Ok(())
}

// ---------------------------------------------------------------- harness

/// What one `mpirun` did.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    seconds: f64,
}

/// Runs this binary as a worker under `mpirun -np N` with `extra` mpirun
/// options and `env`, killed if it outlives `limit` (so that no bug can
/// hang the test).
fn mpirun(np: usize, extra: &[&str], args: &[&str], env: &[(&str, &str)], limit: Duration) -> Run {
    let exe = std::env::current_exe().expect("the test binary's path");
    let mut cmd = Command::new("mpirun");
    cmd.args(["-np", &np.to_string(), "--oversubscribe"])
        .args(extra)
        .arg(exe)
        .arg("--worker")
        .args(args)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .env("RAYON_NUM_THREADS", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let start = Instant::now();
    let mut child = cmd.spawn().expect("mpirun starts");
    let read = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let out = read(Box::new(child.stdout.take().expect("piped")));
    let err = read(Box::new(child.stderr.take().expect("piped")));
    let code = loop {
        if let Some(status) = child.try_wait().expect("wait for mpirun") {
            break status.code();
        }
        if start.elapsed() > limit {
            // SIGTERM lets mpirun end its ranks; SIGKILL if it does not.
            let _ = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status();
            std::thread::sleep(Duration::from_secs(3));
            let _ = child.kill();
            let _ = child.wait();
            panic!("mpirun -np {np} {args:?} outlived {limit:?}: a hang");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Run {
        code,
        stdout: out.join().unwrap_or_default(),
        stderr: err.join().unwrap_or_default(),
        seconds: start.elapsed().as_secs_f64(),
    }
}

fn expect_ok(run: &Run, what: &str) {
    assert!(
        run.code == Some(0) && run.stdout.contains("OK"),
        "{what}: exit {:?}\nstdout:\n{}\nstderr:\n{}",
        run.code,
        run.stdout,
        run.stderr
    );
}

const LIMIT: Duration = Duration::from_secs(90);

fn equal_to_large_batch() {
    for (np, eager, buckets) in [
        (2, false, "64"),
        (2, true, "1000000"),
        (3, false, "1000000"),
        (3, true, "64"),
    ] {
        let mut args = vec![
            "--compare",
            "--steps",
            "12",
            "--batch",
            "4",
            "--bucket-bytes",
            buckets,
        ];
        if eager {
            args.push("--eager");
        }
        let run = mpirun(np, &[], &args, &[], LIMIT);
        expect_ok(&run, "data parallel vs large batch");
        print!(
            "  {}",
            run.stdout
                .lines()
                .find(|l| l.contains("worst"))
                .unwrap_or("?")
        );
        println!(" ({:.1} s)", run.seconds);
    }
}

/// Overlapped reduction (from the gradient-ready hook) against reduction
/// after backward: equal at every step (`--check-overlap`) and in the
/// final weights, bit for bit, with several buckets.
fn overlap_equals_after_backward(dir: &Path) {
    for (np, eager) in [(2, false), (2, true), (3, false), (3, true)] {
        let out = |name: &str| dir.join(format!("{name}-{np}-{eager}.params"));
        let (plain, overlapped) = (out("plain"), out("overlap"));
        let mut args = vec!["--steps", "12", "--batch", "4", "--bucket-bytes", "64"];
        if eager {
            args.push("--eager");
        }
        let p = |p: &Path| p.display().to_string();
        let (plain_s, overlapped_s) = (p(&plain), p(&overlapped));
        let run = mpirun(
            np,
            &[],
            &[&args[..], &["--out", &plain_s]].concat(),
            &[],
            LIMIT,
        );
        expect_ok(&run, "reduced after backward");
        let hooked = [
            &args[..],
            &["--overlap", "--check-overlap", "--out", &overlapped_s],
        ];
        let run = mpirun(np, &[], &hooked.concat(), &[], LIMIT);
        expect_ok(&run, "reduced during backward");
        let (a, b) = (
            NDArray::load_params(&plain).unwrap(),
            NDArray::load_params(&overlapped).unwrap(),
        );
        assert_eq!(a, b, "np {np} eager {eager}: overlapped weights differ");
        println!(
            "  {np} ranks, eager {eager}: every step's mean and the weights equal bit for bit"
        );
    }
    for np in [2, 3] {
        let run = mpirun(np, &[], &["--reducer-order"], &[], LIMIT);
        expect_ok(&run, "gradients in any order");
        println!("  {np} ranks: {}", run.stdout.trim());
    }
}

fn resume_equals_uninterrupted(dir: &Path) {
    let (whole, resumed, ckpt) = (
        dir.join("whole.params"),
        dir.join("resumed.params"),
        dir.join("ckpt"),
    );
    let p = |p: &Path| p.display().to_string();
    let run = mpirun(2, &[], &["--steps", "30", "--out", &p(&whole)], &[], LIMIT);
    expect_ok(&run, "uninterrupted run");
    let first = [
        "--steps",
        "30",
        "--ckpt",
        &p(&ckpt),
        "--ckpt-every",
        "5",
        "--stop-after",
        "17",
    ];
    let run = mpirun(2, &[], &first, &[], LIMIT);
    assert_eq!(run.code, Some(0), "first half: {}", run.stderr);
    let second = [
        "--steps",
        "30",
        "--ckpt",
        &p(&ckpt),
        "--ckpt-every",
        "5",
        "--out",
        &p(&resumed),
    ];
    let run = mpirun(2, &[], &second, &[], LIMIT);
    expect_ok(&run, "resumed run");
    assert!(
        run.stdout.contains("resumed at step 15 (epoch 1)"),
        "{}",
        run.stdout
    );
    let (a, b) = (
        NDArray::load_params(&whole).unwrap(),
        NDArray::load_params(&resumed).unwrap(),
    );
    assert_eq!(a, b, "resumed weights differ from the uninterrupted run's");
    println!("  resumed at step 15 of 30: weights equal bit for bit");
}

/// `--fail how:rank:5` on `np` ranks with a 3 s timeout (`extra` mpirun
/// options, `worker` arguments): every other rank exits non-zero naming
/// `rank`, within the timeout plus slack.
fn failure(np: usize, how: &str, rank: i32, extra: &[&str], worker: &[&str]) {
    let fail = format!("{how}:{rank}:5");
    let env = [("SIMPLEOP_DIST_TIMEOUT_SECS", "3")];
    let args = [&["--steps", "50", "--fail", &fail], worker].concat();
    let run = mpirun(np, extra, &args, &env, LIMIT);
    let all = format!("{}{}", run.stdout, run.stderr);
    // With --enable-recovery mpirun reports 0 even after MPI_Abort; the
    // ranks' messages below are the check there.
    let recovery = extra.contains(&"--enable-recovery");
    assert!(
        recovery || run.code != Some(0),
        "{how}: the job succeeded:\n{all}"
    );
    assert!(!all.contains("\nOK"), "{how}: a rank finished:\n{all}");
    assert!(run.seconds < 3.0 + 15.0, "{how}: took {:.1} s", run.seconds);
    if extra.is_empty() && how == "kill" {
        // Plain mpirun ends the job itself when a rank dies.
        assert!(all.contains("exited on signal 9"), "{all}");
    } else {
        for other in (0..np as i32).filter(|&r| r != rank) {
            let line = format!("rank {other} of {np}:");
            let named = all
                .lines()
                .any(|l| l.contains(&line) && l.contains(&format!("rank {rank} ")));
            assert!(
                named,
                "{how}: rank {other} printed no error naming rank {rank}:\n{all}"
            );
        }
    }
    println!(
        "  {how} rank {rank} of {np} {extra:?} {worker:?}: the others exited with the error in {:.1} s",
        run.seconds
    );
}

fn harness() -> ExitCode {
    if Command::new("mpirun").arg("--version").output().is_err() {
        println!("mpi tests: SKIPPED, no `mpirun` on the PATH (install openmpi-bin; .ci/run does)");
        return ExitCode::SUCCESS;
    }
    let dir = std::env::temp_dir().join(format!("simpleop-dist-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    println!("data-parallel gradients and weights vs one process with the large batch:");
    equal_to_large_batch();
    println!("gradients reduced during backward vs after it:");
    overlap_equals_after_backward(&dir);
    println!("checkpoint and resume:");
    resume_equals_uninterrupted(&dir);
    println!("failures:");
    failure(3, "kill", 1, &["--enable-recovery"], &[]);
    failure(2, "hang", 1, &[], &[]);
    failure(3, "hang", 0, &[], &[]);
    failure(2, "kill", 1, &[], &[]);
    // Overlapped: the buckets start during backward, arrival waits for
    // `finish`, so a rank hanging after backward is still named.
    failure(3, "hang", 1, &[], &["--overlap"]);
    let _ = std::fs::remove_dir_all(&dir);
    println!("mpi tests: all passed");
    ExitCode::SUCCESS
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--worker") => match worker(&args[1..]) {
            Ok(()) => ExitCode::SUCCESS,
            Err(_) => ExitCode::FAILURE,
        },
        // `cargo test` passes libtest's options (--nocapture, filters):
        // `--list` must list nothing, the rest run the harness.
        Some("--list") => ExitCode::SUCCESS,
        _ => {
            let filters: Vec<&String> = args.iter().filter(|a| !a.starts_with('-')).collect();
            if filters.is_empty() || filters.iter().any(|f| "mpi".contains(f.as_str())) {
                harness()
            } else {
                ExitCode::SUCCESS
            }
        }
    }
}
