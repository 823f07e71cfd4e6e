//! What the backends share: the steps they emit, the registers they give
//! the planner, the constant pool and the loop skeleton.

use iced_x86::code_asm::*;

use crate::engine::lanes::Lane;
use crate::engine::rows::Summand;

/// The vector registers a backend gives the planner: `values` for values
/// (numbered from 0), `with_sums` of them when the program accumulates
/// (the rest hold the sums; `None`: the backend does not accumulate).
#[derive(Clone, Copy, Debug)]
pub(super) struct Regs {
    pub(super) values: usize,
    pub(super) with_sums: Option<usize>,
}

#[derive(Clone, Debug)]
pub(super) enum Step {
    Load {
        slot: usize,
        reg: usize,
    },
    Op {
        lane: Lane,
        ins: Vec<usize>,
        out: usize,
    },
    Store {
        slot: usize,
        reg: usize,
        stream: bool,
    },
    /// Adds the summand of `reg`'s 16 values to two of the sums.
    Accumulate {
        reg: usize,
        summand: Summand,
    },
}

/// Constant pool: each distinct bit pattern once, as `lanes` copies (one
/// where instructions broadcast a memory operand, a whole vector where
/// they cannot).
pub(super) struct Pool {
    pub(super) bits: Vec<u32>,
    lanes: usize,
}

impl Pool {
    pub(super) fn new(lanes: usize) -> Pool {
        Pool {
            bits: Vec::new(),
            lanes,
        }
    }
    /// Byte offset of `bits` in every lane, added on first use.
    pub(super) fn offset(&mut self, bits: u32) -> i32 {
        let lanes = self.lanes;
        self.block(&vec![bits; lanes])
    }
    /// Byte offset of a block of `lanes` words, added on first use.
    pub(super) fn block(&mut self, words: &[u32]) -> i32 {
        debug_assert_eq!(words.len(), self.lanes);
        let k = match self.bits.chunks(self.lanes).position(|b| b == words) {
            Some(k) => k,
            None => {
                self.bits.extend_from_slice(words);
                self.bits.len() / self.lanes - 1
            }
        };
        (4 * self.lanes * k) as i32
    }
    /// `x` as a scalar memory operand (for `vbroadcastss`).
    pub(super) fn ptr(&mut self, x: f32) -> AsmMemoryOperand {
        dword_ptr(rsi + self.offset(x.to_bits()))
    }
}

/// `r8 = (1 << (len - i)) - 1`, the lanes of a last partial vector or
/// chunk (`rdx` the length, `rcx` the element index, kept; `len - i` below
/// 32), with plain shifts: no BMI2 needed.
pub(super) fn tail_lanes(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.mov(r9, rcx)?;
    a.mov(rcx, rdx)?;
    a.sub(rcx, r9)?;
    a.mov(r8d, 1)?;
    a.shl(r8, cl)?;
    a.sub(r8, 1)?;
    a.mov(rcx, r9)
}

/// The loop of every program: `body` over whole chunks of `chunk`
/// elements while they fit, then, when elements are left, `tail` over
/// them with `r8` holding their lanes ([`tail_lanes`]). `rcx` is the
/// element index, `rdx` the length.
pub(super) fn chunk_loop(
    a: &mut CodeAssembler,
    pool: &mut Pool,
    chunk: i32,
    mut body: impl FnMut(&mut CodeAssembler, &mut Pool) -> Result<(), IcedError>,
    mut tail: impl FnMut(&mut CodeAssembler, &mut Pool) -> Result<(), IcedError>,
) -> Result<(), IcedError> {
    let mut main = a.create_label();
    let mut last = a.create_label();
    let mut done = a.create_label();
    a.xor(ecx, ecx)?;
    a.cmp(rdx, chunk)?;
    a.jb(last)?;
    a.set_label(&mut main)?;
    body(a, pool)?;
    a.add(rcx, chunk)?;
    a.lea(rax, qword_ptr(rcx + chunk))?;
    a.cmp(rax, rdx)?;
    a.jbe(main)?;
    a.set_label(&mut last)?;
    a.cmp(rcx, rdx)?;
    a.jae(done)?;
    tail_lanes(a)?;
    tail(a, pool)?;
    a.set_label(&mut done)
}

/// A backend's way to assemble a program's steps into its loop.
pub(super) type Assembler = fn(&[Step], &mut Pool) -> Result<Vec<u8>, IcedError>;

/// A program's code and its constants, `lanes` copies per constant:
/// assembled by `accumulating` when a step adds to a row sink's sums,
/// else by `plain`.
pub(super) fn assemble(
    steps: &[Step],
    lanes: usize,
    (plain, accumulating): (Assembler, Assembler),
) -> Result<(Vec<u8>, Pool), IcedError> {
    let mut pool = Pool::new(lanes);
    let code = if steps.iter().any(|s| matches!(s, Step::Accumulate { .. })) {
        accumulating(steps, &mut pool)?
    } else {
        plain(steps, &mut pool)?
    };
    Ok((code, pool))
}

/// The end of every program: clean upper halves for the SSE code after
/// it, return, and the bytes.
pub(super) fn finish(mut a: CodeAssembler) -> Result<Vec<u8>, IcedError> {
    a.vzeroupper()?;
    a.ret()?;
    a.assemble(0)
}
