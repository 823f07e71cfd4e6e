//! [`Dist`]: the process's place in the job, and collectives that wait
//! with a deadline and name the rank that failed.
//!
//! Every collective is a *phase*: each rank first posts a small arrival
//! message (the collective's sequence number and a fingerprint of its
//! sizes) to every other rank, then starts the operation itself, then
//! polls both until they complete or the timeout runs out. At the
//! deadline the ranks whose arrival never came are the failed ones: they
//! died, or hang, before the collective. A rank that detects a failure
//! sends a report to the others (which may be waiting elsewhere, or would
//! time out a little later), prints the error, and returns it; the job
//! then ends by `MPI_Abort`, since MPI cannot repair a communicator and
//! `MPI_Finalize` would wait for the failed rank forever.

use std::time::{Duration, Instant};

use mpi::Threading;
use mpi::environment::Universe;
use mpi::topology::{Communicator, SimpleCommunicator};
use simpleop::NDArray;

use crate::raw::{Buf, Pending};
use crate::{DistConfig, DistError, Result};

/// Tag of the arrival messages.
const TAG_ARRIVE: i32 = 7001;
/// Tag of failure reports.
const TAG_REPORT: i32 = 7002;
/// A report: the collective's number, how many ranks are missing, and up
/// to `REPORT_WORDS − 2` of them.
const REPORT_WORDS: usize = 16;

/// This process's part in a data-parallel job: its rank, the number of
/// ranks, and the collectives the other modules build on.
///
/// A `Dist` whose collective failed ends the whole job when it is dropped
/// (after [`DistConfig::linger`], by `MPI_Abort`): the failed rank cannot
/// take part in `MPI_Finalize`, and the survivors must not wait for it.
/// A healthy one finalizes MPI when dropped.
pub struct Dist {
    world: SimpleCommunicator,
    rank: i32,
    size: i32,
    config: DistConfig,
    /// Collectives started so far (the same count on every rank).
    seq: u64,
    /// The first failure's message, once there was one.
    failed: Option<String>,
    /// A receive for another rank's failure report, from any rank.
    inbox: Option<Pending>,
    /// Dropped last: finalizes MPI.
    _universe: Universe,
}

/// One collective in flight: its arrival messages and its operations.
#[derive(Debug)]
pub(crate) struct Phase {
    op: String,
    seq: u64,
    fingerprint: u64,
    sends: Vec<(i32, Pending)>,
    arrivals: Vec<(i32, Pending)>,
}

impl Dist {
    /// Initialises MPI (funneled: only this thread calls it) and makes
    /// the world communicator return errors instead of aborting.
    /// `mpirun -np N program` starts N processes that each call this once.
    pub fn init(config: DistConfig) -> Result<Dist> {
        let (universe, _) =
            mpi::initialize_with_threading(Threading::Funneled).ok_or(DistError::Init)?;
        let world = universe.world();
        crate::raw::errors_return(&world)?;
        let any = mpi::ffi::MPI_ANY_SOURCE;
        let inbox = Pending::receive("Dist::init", &world, any, TAG_REPORT, REPORT_WORDS)?;
        Ok(Dist {
            rank: world.rank(),
            size: world.size(),
            world,
            config,
            seq: 0,
            failed: None,
            inbox: Some(inbox),
            _universe: universe,
        })
    }

    /// This process's rank, `0..size`.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> i32 {
        self.size
    }

    /// Whether this is rank 0, which broadcasts the start-up parameters
    /// and writes checkpoints.
    pub fn is_root(&self) -> bool {
        self.rank == 0
    }

    /// The settings.
    pub fn config(&self) -> &DistConfig {
        &self.config
    }

    /// Collectives run so far.
    pub fn collectives(&self) -> u64 {
        self.seq
    }

    /// The host name MPI reports (for messages and a hostfile check).
    pub fn host(&self) -> String {
        mpi::environment::processor_name().unwrap_or_else(|_| "?".into())
    }

    /// Waits until every rank has called `barrier` (with the timeout).
    pub fn barrier(&mut self, op: &str) -> Result<()> {
        let phase = self.begin(op, fingerprint(op, &[]))?;
        self.finish(phase, Vec::new()).map(drop)
    }

    /// Overwrites `arrays` on every rank with rank 0's values: the
    /// start-up broadcast that makes all replicas equal. Every rank passes
    /// arrays of the same shapes, float32.
    pub fn broadcast(&mut self, arrays: &mut [&mut NDArray]) -> Result<()> {
        let op = "Dist::broadcast";
        let sizes: Vec<u64> = arrays.iter().map(|a| a.size() as u64).collect();
        let mut flat = Vec::with_capacity(sizes.iter().sum::<u64>() as usize);
        for (k, a) in arrays.iter().enumerate() {
            flat.extend_from_slice(a.as_slice::<f32>().map_err(|_| {
                DistError::invalid(
                    op,
                    format!("arrays[{k}]"),
                    format!("is {:?}, expected float32", a.dtype()),
                )
            })?);
        }
        let phase = self.begin(op, fingerprint(op, &sizes))?;
        let pending = Pending::broadcast(op, &self.world, 0, Buf::F32(flat));
        let pending = self.started(&phase, pending)?;
        let mut done = self.finish(phase, vec![pending])?;
        let Some(Buf::F32(flat)) = done
            .pop()
            .and_then(Pending::into_buffers)
            .and_then(|mut b| b.pop())
        else {
            return Err(DistError::invalid(op, "buffer", "lost by MPI_Ibcast"));
        };
        let mut at = 0;
        for a in arrays.iter_mut() {
            let n = a.size();
            a.as_slice_mut::<f32>()?.copy_from_slice(&flat[at..at + n]);
            at += n;
        }
        Ok(())
    }

    /// Rank 0's `bytes` on every rank (the others pass anything, e.g. an
    /// empty vector): its length first, then the bytes.
    pub fn broadcast_bytes(&mut self, op: &str, bytes: Vec<u8>) -> Result<Vec<u8>> {
        let len = vec![bytes.len() as u64];
        let phase = self.begin(op, fingerprint(op, &[]))?;
        let pending = Pending::broadcast(op, &self.world, 0, Buf::U64(len));
        let pending = self.started(&phase, pending)?;
        let mut done = self.finish(phase, vec![pending])?;
        let Some(Buf::U64(len)) = done
            .pop()
            .and_then(Pending::into_buffers)
            .and_then(|mut b| b.pop())
        else {
            return Err(DistError::invalid(op, "length", "lost by MPI_Ibcast"));
        };
        if len[0] == 0 {
            // Open MPI refuses an empty broadcast (MPI_ERR_ARG).
            return Ok(Vec::new());
        }
        let mut bytes = bytes;
        if !self.is_root() {
            bytes = vec![0; len[0] as usize];
        }
        let phase = self.begin(op, fingerprint(op, &len))?;
        let pending = Pending::broadcast(op, &self.world, 0, Buf::U8(bytes));
        let pending = self.started(&phase, pending)?;
        let mut done = self.finish(phase, vec![pending])?;
        match done
            .pop()
            .and_then(Pending::into_buffers)
            .and_then(|mut b| b.pop())
        {
            Some(Buf::U8(bytes)) => Ok(bytes),
            _ => Err(DistError::invalid(op, "bytes", "lost by MPI_Ibcast")),
        }
    }

    /// Ends the job from this rank: waits [`DistConfig::linger`] so that
    /// the other ranks can print their own errors, then `MPI_Abort`s with
    /// `code` (mpirun then ends every rank).
    pub fn abort(&self, code: i32) -> ! {
        std::thread::sleep(self.config.linger);
        self.world.abort(code)
    }

    /// An error unless the communicator is still usable.
    fn usable(&self, op: &str) -> Result<()> {
        match &self.failed {
            None => Ok(()),
            Some(first) => Err(DistError::Broken {
                op: op.into(),
                first: first.clone(),
            }),
        }
    }

    /// Starts a collective: posts this rank's arrival to every other rank
    /// and a receive for each of theirs.
    pub(crate) fn begin(&mut self, op: &str, fingerprint: u64) -> Result<Phase> {
        let mut phase = self.open(op, fingerprint)?;
        self.arrive(&mut phase)?;
        Ok(phase)
    }

    /// Numbers a collective without arriving yet: a caller that starts
    /// its operations over a long computation ([`crate::GradReducer`]
    /// during backward) arrives when that is done, so that a rank dying
    /// or hanging in it is named as missing.
    pub(crate) fn open(&mut self, op: &str, fingerprint: u64) -> Result<Phase> {
        self.usable(op)?;
        self.seq += 1;
        Ok(Phase {
            op: op.into(),
            seq: self.seq,
            fingerprint,
            sends: Vec::new(),
            arrivals: Vec::new(),
        })
    }

    /// Posts this rank's arrival at `phase` to every other rank and a
    /// receive for each of theirs.
    pub(crate) fn arrive(&mut self, phase: &mut Phase) -> Result<()> {
        let (op, fingerprint) = (phase.op.clone(), phase.fingerprint);
        let op = op.as_str();
        let me = self.rank;
        for peer in (0..self.size).filter(|&p| p != me) {
            let words = vec![phase.seq, fingerprint];
            let send = Pending::send(op, &self.world, peer, TAG_ARRIVE, words);
            let send = self.started(phase, send)?;
            phase.sends.push((peer, send));
            let arrival = Pending::receive(op, &self.world, peer, TAG_ARRIVE, 2);
            let arrival = self.started(phase, arrival)?;
            phase.arrivals.push((peer, arrival));
        }
        Ok(())
    }

    /// The result of starting an operation of `phase`; a failure to start
    /// is a failure of the phase.
    pub(crate) fn started(&mut self, phase: &Phase, pending: Result<Pending>) -> Result<Pending> {
        pending.map_err(|e| self.fail(phase, e))
    }

    /// Starts a summing all-reduce of `send` into `recv` within `phase`.
    pub(crate) fn start_allreduce(
        &mut self,
        phase: &Phase,
        send: Vec<f32>,
        recv: Vec<f32>,
    ) -> Result<Pending> {
        let pending = Pending::allreduce_sum(&phase.op, &self.world, send, recv);
        self.started(phase, pending)
    }

    /// Tests `ops` once, without waiting: MPI moves a non-blocking
    /// collective only inside MPI calls (Open MPI has no progress thread by
    /// default), so a caller computing between starting and finishing one
    /// calls this now and then. A failed test fails the phase.
    pub(crate) fn progress(&mut self, phase: &Phase, ops: &mut [Pending]) -> Result<()> {
        for op in ops.iter_mut() {
            if let Err(e) = op.test(&phase.op) {
                return Err(self.fail(phase, e));
            }
        }
        Ok(())
    }

    /// Waits for `phase`'s arrivals and `ops`, until the timeout runs out
    /// after this call starts; returns the completed operations.
    pub(crate) fn finish(
        &mut self,
        mut phase: Phase,
        mut ops: Vec<Pending>,
    ) -> Result<Vec<Pending>> {
        let start = Instant::now();
        loop {
            match self.poll(&mut phase, &mut ops) {
                Ok(true) => return Ok(ops),
                Ok(false) => {}
                Err(e) => return Err(self.fail(&phase, e)),
            }
            if start.elapsed() >= self.config.timeout {
                let missing = phase
                    .arrivals
                    .iter()
                    .filter(|(_, a)| a.words().is_none())
                    .map(|&(peer, _)| peer)
                    .collect();
                let e = DistError::Timeout {
                    op: phase.op.clone(),
                    seq: phase.seq,
                    missing,
                    timeout: self.config.timeout,
                };
                return Err(self.fail(&phase, e));
            }
            pause(start.elapsed());
        }
    }

    /// One round of tests: whether everything of the phase is done.
    fn poll(&mut self, phase: &mut Phase, ops: &mut [Pending]) -> Result<bool> {
        let mut all = true;
        for op in ops.iter_mut() {
            all &= op.test(&phase.op)?;
        }
        for (peer, send) in &mut phase.sends {
            all &= send.test(&format!("{} (arrival to rank {peer})", phase.op))?;
        }
        for (peer, arrival) in &mut phase.arrivals {
            if !arrival.test(&format!("{} (arrival from rank {peer})", phase.op))? {
                all = false;
            } else if let Some(w) = arrival.words()
                && (w[0] != phase.seq || w[1] != phase.fingerprint)
            {
                let reason = if w[0] != phase.seq {
                    format!("its collective #{}, this rank's #{}", w[0], phase.seq)
                } else {
                    "different name or sizes".into()
                };
                return Err(DistError::Mismatch {
                    op: phase.op.clone(),
                    seq: phase.seq,
                    rank: *peer,
                    reason,
                });
            }
        }
        if !all {
            self.check_inbox(phase)?;
        }
        Ok(all)
    }

    /// A failure report from another rank, if one came.
    fn check_inbox(&mut self, phase: &Phase) -> Result<()> {
        let Some(inbox) = self.inbox.as_mut() else {
            return Ok(());
        };
        if !inbox.test(&phase.op)? {
            return Ok(());
        }
        let words = inbox.words().map(<[u64]>::to_vec).unwrap_or_default();
        self.inbox = None;
        let count = words.get(1).copied().unwrap_or(0) as usize;
        let missing = words
            .iter()
            .skip(2)
            .take(count)
            .map(|&r| r as i32)
            .collect();
        Err(DistError::PeerReported {
            op: phase.op.clone(),
            seq: words.first().copied().unwrap_or(0),
            reporter: reporter_of(&words, self.size),
            missing,
        })
    }

    /// Records a failure: prints it, reports it to the ranks that are
    /// still there (unless it came from one), and returns it.
    fn fail(&mut self, phase: &Phase, e: DistError) -> DistError {
        // One write per line: `eprintln!` writes each piece separately and
        // the ranks' lines interleave mid-line under mpirun.
        let line = format!("simpleop-dist: rank {} of {}: {e}\n", self.rank, self.size);
        let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
        if self.failed.is_none() {
            self.failed = Some(e.to_string());
            match &e {
                // The reporter has told everyone.
                DistError::PeerReported { .. } => {}
                DistError::Timeout { missing, .. } => self.report(phase, missing),
                _ => self.report(phase, &[]),
            }
        }
        e
    }

    /// Sends a failure report to every rank but this one and `missing`.
    /// Best effort: the sends are left to finish on their own.
    fn report(&mut self, phase: &Phase, missing: &[i32]) {
        let mut words = vec![phase.seq, missing.len() as u64];
        words.extend(missing.iter().take(REPORT_WORDS - 3).map(|&r| r as u64));
        words.resize(REPORT_WORDS - 1, 0);
        words.push(self.rank as u64);
        for peer in (0..self.size).filter(|p| *p != self.rank && !missing.contains(p)) {
            // Dropped unfinished, a send leaks its buffer: harmless, the
            // job is ending.
            let _ = Pending::send(&phase.op, &self.world, peer, TAG_REPORT, words.clone())
                .and_then(|mut s| s.test(&phase.op).map(|_| s));
        }
    }
}

/// The reporting rank, carried in a report's last word.
fn reporter_of(words: &[u64], size: i32) -> i32 {
    match words.last() {
        Some(&r) if r < size as u64 => r as i32,
        _ => -1,
    }
}

impl Drop for Dist {
    fn drop(&mut self) {
        if self.failed.is_some() {
            self.abort(1);
        }
        if let Some(mut inbox) = self.inbox.take() {
            // Nothing may be pending at MPI_Finalize.
            let _ = inbox.cancel("Dist::drop");
        }
    }
}

/// Between polls: yield for the first millisecond (a collective on one
/// machine takes microseconds), then sleep up to a millisecond, so that a
/// waiting rank leaves the CPU to ranks still computing.
fn pause(waited: Duration) {
    if waited < Duration::from_millis(1) {
        std::thread::yield_now();
    } else {
        std::thread::sleep((waited / 20).min(Duration::from_millis(1)));
    }
}

/// FNV-1a over a collective's name and sizes: ranks that call different
/// collectives, or the same with other sizes, disagree on it.
pub(crate) fn fingerprint(op: &str, sizes: &[u64]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64;
    let bytes = op.bytes().chain(sizes.iter().flat_map(|s| s.to_le_bytes()));
    for b in bytes {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}
