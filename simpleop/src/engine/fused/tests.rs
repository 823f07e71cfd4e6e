//! The fused driver's own tests: row sinks and deferred stores.

use super::entry::run_program_reducing;
use super::program::{TileInstr, TileProgram};
use super::row_sink::RowSink;
use super::slots::{SlotUses, deferred_slots};
use crate::engine::isa::active;
use crate::engine::jit;
use crate::engine::rows::{RowReducer, RowReduction};
use crate::kernel::TileFns;
use crate::{EnvArguments, OpReqType, Result, Shape, TBlob, TBlobMut};

fn noop32(_: &EnvArguments, _: &[&[f32]], _: &mut [f32]) -> Result<()> {
    Ok(())
}
fn noop64(_: &EnvArguments, _: &[&[f64]], _: &mut [f64]) -> Result<()> {
    Ok(())
}

fn sub32(_: &EnvArguments, ins: &[&[f32]], out: &mut [f32]) -> Result<()> {
    for ((o, a), b) in out.iter_mut().zip(ins[0]).zip(ins[1]) {
        *o = a - b;
    }
    Ok(())
}
fn sub64(_: &EnvArguments, ins: &[&[f64]], out: &mut [f64]) -> Result<()> {
    for ((o, a), b) in out.iter_mut().zip(ins[0]).zip(ins[1]) {
        *o = a - b;
    }
    Ok(())
}

/// The subtraction's entry points.
fn sub_fns() -> TileFns {
    TileFns {
        forward_f32: sub32,
        forward_f64: sub64,
        backward_f32: None,
        backward_f64: None,
        lane: None,
        more_outputs: &[],
    }
}

/// `slots[2] = slots[0] - slots[1]`.
fn subtract(env: &EnvArguments) -> TileInstr<'_> {
    TileInstr::Forward {
        fns: sub_fns(),
        env,
        ins: &[0, 1],
        out: 2,
    }
}

/// A sink of `slot` reducing rows of `len` into `dst`.
fn sink<'a, T: crate::Element>(
    slot: usize,
    reducer: crate::engine::rows::RowReducer,
    len: usize,
    dst: &'a mut [T],
) -> RowSink<'a> {
    let rows = dst.len();
    RowSink {
        slot,
        reduction: RowReduction { reducer, len },
        dst: TBlobMut::from_slice(dst, [rows]).unwrap(),
    }
}

/// `sqrt(sum((x - y)², rows of len))`, the program's slot 2 fed to the
/// sink.
fn row_sq_dist(x: &[f32], y: &[f32], len: usize, dst: &mut [f32], parallel: bool) -> Result<()> {
    let env = EnvArguments::none();
    let prog = TileProgram {
        codegen: true,
        slots: 3,
        instrs: vec![subtract(&env)],
        cost: 1,
    };
    let shape = Shape::new([x.len()]);
    let ins = [
        TBlob::from_slice(x, shape.clone())?,
        TBlob::from_slice(y, shape.clone())?,
    ];
    let sink = sink(2, RowReducer::Norm2, len, dst);
    run_program_reducing(&prog, &ins, &mut [], sink, &shape, parallel)
}

#[test]
fn a_sink_reduces_every_row_as_the_reduction_alone_does() {
    crate::engine::grain::set_parallel_work(crate::engine::grain::PARALLEL_WORK);
    for len in [1, 7, 32, 33, 1000, 1500, 5000] {
        let rows = (300_000 / len).max(3);
        let n = rows * len;
        let x: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.37 - 9.0).collect();
        let y: Vec<f32> = (0..n).map(|i| (i % 89) as f32 * 0.21).collect();
        for parallel in [false, true] {
            let mut got = vec![f32::NAN; rows];
            row_sq_dist(&x, &y, len, &mut got, parallel).unwrap();
            for (r, g) in got.iter().enumerate() {
                let d: Vec<f32> = (r * len..(r + 1) * len).map(|i| x[i] - y[i]).collect();
                let want = RowReducer::Norm2.reduce(&d) as f32;
                assert_eq!(g.to_bits(), want.to_bits(), "len {len} row {r} {parallel}");
            }
        }
    }
}

#[test]
fn a_slot_both_stored_and_sunk_reaches_both() {
    let env = EnvArguments::none();
    let prog = TileProgram {
        codegen: true,
        slots: 3,
        instrs: vec![
            subtract(&env),
            TileInstr::Store {
                slot: 2,
                output: 0,
                req: OpReqType::WriteTo,
            },
        ],
        cost: 1,
    };
    let (rows, len) = (300, 50);
    let x: Vec<f32> = (0..rows * len).map(|i| (i % 13) as f32).collect();
    let y: Vec<f32> = (0..rows * len).map(|i| (i % 7) as f32 * 0.5).collect();
    let shape = Shape::new([rows * len]);
    let mut diff = vec![f32::NAN; rows * len];
    let mut sums = vec![f32::NAN; rows];
    let ins = [
        TBlob::from_slice(&x, shape.clone()).unwrap(),
        TBlob::from_slice(&y, shape.clone()).unwrap(),
    ];
    let mut outs = [TBlobMut::from_slice(&mut diff, shape.clone()).unwrap()];
    let both = sink(2, RowReducer::Sum, len, &mut sums);
    run_program_reducing(&prog, &ins, &mut outs, both, &shape, false).unwrap();
    drop(outs);
    for (i, d) in diff.iter().enumerate() {
        assert_eq!(*d, x[i] - y[i]);
    }
    for (r, s) in sums.iter().enumerate() {
        let want = RowReducer::Sum.reduce(&diff[r * len..(r + 1) * len]);
        assert_eq!(s.to_bits(), (want as f32).to_bits(), "row {r}");
    }
    // A slot nothing writes holds no value to reduce.
    let mut sums = vec![0.0f32; rows];
    let empty = TileProgram {
        codegen: true,
        slots: 3,
        instrs: vec![],
        cost: 1,
    };
    let unwritten = sink(2, RowReducer::Sum, len, &mut sums);
    assert!(run_program_reducing(&empty, &ins, &mut [], unwritten, &shape, false).is_err());
}

/// Summing code calls once per row piece, so beside a streamed output
/// (whose stores need whole 64-byte lines) it sums only rows of whole
/// lines; others are summed from the slot. Both give the sink's bits,
/// and neither faults (rows of 1,000 f32 end mid-line).
#[test]
fn sums_beside_a_streamed_output_start_on_cache_lines() {
    fn lane_sub(_: &EnvArguments) -> Option<jit::Lane> {
        Some(jit::Lane {
            op: jit::LaneOp::Sub,
            scalar: 0.0,
        })
    }
    let _switches = crate::engine::hints::Switches::hold();
    // outputs of 8 MiB and more stream
    crate::engine::hints::set_last_level_cache_bytes(0);
    let env = EnvArguments::none();
    let fns = TileFns {
        lane: Some(lane_sub),
        ..sub_fns()
    };
    let prog = TileProgram {
        codegen: true,
        slots: 4,
        instrs: vec![
            TileInstr::Forward {
                fns,
                env: &env,
                ins: &[0, 1],
                out: 2,
            },
            TileInstr::Forward {
                fns,
                env: &env,
                ins: &[1, 0],
                out: 3,
            },
            TileInstr::Store {
                slot: 3,
                output: 0,
                req: OpReqType::WriteTo,
            },
        ],
        cost: 1,
    };
    for len in [1000, 1008] {
        let rows = (9 << 20) / len;
        let n = rows * len;
        let x: Vec<f32> = (0..n).map(|i| (i % 13) as f32 * 0.75).collect();
        let y: Vec<f32> = (0..n).map(|i| (i % 7) as f32 * 0.5).collect();
        let shape = Shape::new([n]);
        // pooled storage starts on a cache line, so the output streams
        let mut out = crate::NDArray::full([n], f64::NAN, crate::DType::F32);
        let mut sums = vec![f32::NAN; rows];
        let ins = [
            TBlob::from_slice(&x, shape.clone()).unwrap(),
            TBlob::from_slice(&y, shape.clone()).unwrap(),
        ];
        let mut outs = [out.blob_mut()];
        let before = jit::summed_ranges();
        let to = sink(2, RowReducer::Sum, len, &mut sums);
        run_program_reducing(&prog, &ins, &mut outs, to, &shape, true).unwrap();
        drop(outs);
        let back = out.blob().as_slice::<f32>().unwrap().to_vec();
        if len == 1008 && jit::generates_on(active()) && prog.codegen {
            assert!(
                jit::summed_ranges() > before,
                "rows of whole lines sum in registers"
            );
        }
        for (i, b) in back.iter().enumerate() {
            assert_eq!(b.to_bits(), (y[i] - x[i]).to_bits(), "element {i}");
        }
        let diff: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a - b).collect();
        for (r, s) in sums.iter().enumerate() {
            let want = RowReducer::Sum.reduce(&diff[r * len..(r + 1) * len]) as f32;
            assert_eq!(s.to_bits(), want.to_bits(), "rows of {len}: row {r}");
        }
    }
}

#[test]
fn a_sink_that_does_not_fit_is_refused_before_any_write() {
    let x = vec![1.0f32; 12];
    let y = vec![0.0f32; 12];
    // Rows that do not cover the space.
    let mut dst = vec![7.0f32; 5];
    assert!(row_sq_dist(&x, &y, 3, &mut dst, false).is_err());
    assert_eq!(dst, [7.0; 5]);
    // Half types round a value before a reduction reads it.
    let prog = TileProgram {
        codegen: true,
        slots: 1,
        instrs: vec![],
        cost: 1,
    };
    let xh = vec![half::f16::ONE; 4];
    let mut dh = vec![half::f16::ZERO; 2];
    let ins = [TBlob::from_slice(&xh, [4]).unwrap()];
    let halves = sink(0, RowReducer::Sum, 2, &mut dh);
    let err = run_program_reducing(&prog, &ins, &mut [], halves, &Shape::new([4]), false);
    assert!(err.unwrap_err().to_string().contains("float32 or float64"));
    assert_eq!(dh, [half::f16::ZERO; 2]);
}

#[test]
fn only_a_result_no_op_reads_waits_for_the_next_tile() {
    let env = EnvArguments::none();
    let fns = TileFns {
        forward_f32: noop32,
        forward_f64: noop64,
        backward_f32: None,
        backward_f64: None,
        lane: None,
        more_outputs: &[],
    };
    let fwd = |ins: &'static [usize], out| TileInstr::Forward {
        fns,
        env: &env,
        ins,
        out,
    };
    let store = |slot, output| TileInstr::Store {
        slot,
        output,
        req: OpReqType::WriteTo,
    };
    // Slot 1 is stored and then read; slot 2 only stored; slots 3
    // and 4 stored into one output.
    let prog = TileProgram {
        codegen: true,
        slots: 5,
        instrs: vec![
            fwd(&[0], 1),
            store(1, 0),
            fwd(&[1], 2),
            store(2, 1),
            fwd(&[1], 3),
            fwd(&[3], 4),
            store(4, 2),
            store(3, 2),
        ],
        cost: 4,
    };
    let uses = SlotUses::of(&prog, 3);
    let all = [true; 3];
    assert_eq!(
        deferred_slots(&prog, &uses, 1, &all).as_slice(),
        [None, None, Some(1), None, None]
    );
    assert_eq!(
        deferred_slots(&prog, &uses, 1, &[true, false, true]).as_slice(),
        [None; 5]
    );
}
