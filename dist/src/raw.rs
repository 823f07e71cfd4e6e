//! Non-blocking MPI operations that own their buffers.
//!
//! rsmpi's requests borrow their buffers inside a scope that must not end
//! while a request is unfinished (it panics or aborts). A collective that
//! times out never finishes, and this crate must then return an error, so
//! a [`Pending`] owns its buffers instead: they are heap allocations that
//! stay where they are while the request runs, and an unfinished
//! `Pending` that is dropped leaks them, since MPI may still write into
//! them. This is the crate's only `unsafe` code.

use std::ffi::{c_int, c_void};

use mpi::ffi::{self, MPI_Datatype, MPI_Request};
use mpi::raw::AsRaw;
use mpi::topology::SimpleCommunicator;
use mpi::traits::Equivalence;

use crate::{DistError, Result};

/// A buffer an operation reads or writes.
#[derive(Debug)]
pub(crate) enum Buf {
    F32(Vec<f32>),
    U8(Vec<u8>),
    U64(Vec<u64>),
}

impl Buf {
    fn parts(&mut self) -> (*mut c_void, usize, MPI_Datatype) {
        match self {
            Buf::F32(v) => (v.as_mut_ptr().cast(), v.len(), datatype::<f32>()),
            Buf::U8(v) => (v.as_mut_ptr().cast(), v.len(), datatype::<u8>()),
            Buf::U64(v) => (v.as_mut_ptr().cast(), v.len(), datatype::<u64>()),
        }
    }
}

fn datatype<T: Equivalence>() -> MPI_Datatype {
    T::equivalent_datatype().as_raw()
}

/// MPI's `int` counts: a longer buffer is an error, not a wrapped count.
fn count(op: &str, len: usize) -> Result<c_int> {
    c_int::try_from(len).map_err(|_| {
        DistError::invalid(
            op,
            "buffer",
            format!("{len} elements is more than MPI's int count"),
        )
    })
}

/// An MPI return code as a result.
pub(crate) fn check(op: &str, call: &'static str, code: c_int) -> Result<()> {
    if code == ffi::MPI_SUCCESS as c_int {
        return Ok(());
    }
    let mut text = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: `text` has room for MPI_MAX_ERROR_STRING characters and the
    // terminator, as MPI_Error_string requires; `len` is a valid int.
    let rc = unsafe { ffi::MPI_Error_string(code, text.as_mut_ptr().cast(), &mut len) };
    let message = if rc == ffi::MPI_SUCCESS as c_int {
        String::from_utf8_lossy(&text[..len.clamp(0, text.len() as c_int) as usize]).into_owned()
    } else {
        "unknown error".into()
    };
    Err(DistError::Mpi {
        op: op.into(),
        call,
        code,
        message,
    })
}

/// Makes MPI calls on `comm` return error codes instead of aborting the
/// process, so that a failed peer surfaces as an error here.
pub(crate) fn errors_return(comm: &SimpleCommunicator) -> Result<()> {
    // SAFETY: the communicator is a live handle (rsmpi's world) and
    // MPI_ERRORS_RETURN is a predefined error handler.
    let rc = unsafe { ffi::MPI_Comm_set_errhandler(comm.as_raw(), ffi::RSMPI_ERRORS_RETURN) };
    check("Dist::init", "MPI_Comm_set_errhandler", rc)
}

/// One started non-blocking operation and the buffers it uses.
#[derive(Debug)]
pub(crate) struct Pending {
    request: MPI_Request,
    bufs: Vec<Buf>,
    done: bool,
}

impl Pending {
    /// `MPI_Iallreduce` summing `send` into `recv` (equal lengths).
    pub(crate) fn allreduce_sum(
        op: &str,
        comm: &SimpleCommunicator,
        send: Vec<f32>,
        recv: Vec<f32>,
    ) -> Result<Pending> {
        if send.len() != recv.len() {
            return Err(DistError::invalid(op, "recv", "must be as long as send"));
        }
        let n = count(op, send.len())?;
        let mut bufs = vec![Buf::F32(send), Buf::F32(recv)];
        let (send_ptr, _, dtype) = bufs[0].parts();
        let (recv_ptr, _, _) = bufs[1].parts();
        let sum = mpi::collective::SystemOperation::sum().as_raw();
        let mut request = std::mem::MaybeUninit::<MPI_Request>::uninit();
        // SAFETY: both buffers hold `n` f32s, are owned by `bufs` (moved
        // into the returned Pending, which never frees them before the
        // request completes) and do not overlap; the communicator, type
        // and operation are live handles; `request` receives the handle.
        let rc = unsafe {
            ffi::MPI_Iallreduce(
                send_ptr,
                recv_ptr,
                n,
                dtype,
                sum,
                comm.as_raw(),
                request.as_mut_ptr(),
            )
        };
        check(op, "MPI_Iallreduce", rc)?;
        // SAFETY: MPI_Iallreduce succeeded, so it wrote the handle.
        let request = unsafe { request.assume_init() };
        Ok(Pending::started(request, bufs))
    }

    /// `MPI_Ibcast` of `buf` from `root` (every rank passes a buffer of the
    /// same length; the root's is sent, the others' overwritten).
    pub(crate) fn broadcast(
        op: &str,
        comm: &SimpleCommunicator,
        root: i32,
        buf: Buf,
    ) -> Result<Pending> {
        let mut bufs = vec![buf];
        let (ptr, len, dtype) = bufs[0].parts();
        let n = count(op, len)?;
        let mut request = std::mem::MaybeUninit::<MPI_Request>::uninit();
        // SAFETY: the buffer holds `n` elements of `dtype` and is owned by
        // the returned Pending until the request completes; the handles
        // are live.
        let rc =
            unsafe { ffi::MPI_Ibcast(ptr, n, dtype, root, comm.as_raw(), request.as_mut_ptr()) };
        check(op, "MPI_Ibcast", rc)?;
        // SAFETY: MPI_Ibcast succeeded, so it wrote the handle.
        let request = unsafe { request.assume_init() };
        Ok(Pending::started(request, bufs))
    }

    /// `MPI_Isend` of `words` to `dest` with `tag`.
    pub(crate) fn send(
        op: &str,
        comm: &SimpleCommunicator,
        dest: i32,
        tag: i32,
        words: Vec<u64>,
    ) -> Result<Pending> {
        let mut bufs = vec![Buf::U64(words)];
        let (ptr, len, dtype) = bufs[0].parts();
        let n = count(op, len)?;
        let mut request = std::mem::MaybeUninit::<MPI_Request>::uninit();
        // SAFETY: the buffer holds `n` u64s and is owned by the returned
        // Pending until the request completes; the handles are live.
        let rc = unsafe {
            ffi::MPI_Isend(
                ptr,
                n,
                dtype,
                dest,
                tag,
                comm.as_raw(),
                request.as_mut_ptr(),
            )
        };
        check(op, "MPI_Isend", rc)?;
        // SAFETY: MPI_Isend succeeded, so it wrote the handle.
        let request = unsafe { request.assume_init() };
        Ok(Pending::started(request, bufs))
    }

    /// `MPI_Irecv` of `len` u64s from `source` (or `MPI_ANY_SOURCE`) with
    /// `tag`.
    pub(crate) fn receive(
        op: &str,
        comm: &SimpleCommunicator,
        source: i32,
        tag: i32,
        len: usize,
    ) -> Result<Pending> {
        let mut bufs = vec![Buf::U64(vec![0; len])];
        let (ptr, _, dtype) = bufs[0].parts();
        let n = count(op, len)?;
        let mut request = std::mem::MaybeUninit::<MPI_Request>::uninit();
        // SAFETY: the buffer has room for `n` u64s and is owned by the
        // returned Pending until the request completes; the handles are
        // live.
        let rc = unsafe {
            ffi::MPI_Irecv(
                ptr,
                n,
                dtype,
                source,
                tag,
                comm.as_raw(),
                request.as_mut_ptr(),
            )
        };
        check(op, "MPI_Irecv", rc)?;
        // SAFETY: MPI_Irecv succeeded, so it wrote the handle.
        let request = unsafe { request.assume_init() };
        Ok(Pending::started(request, bufs))
    }

    fn started(request: MPI_Request, bufs: Vec<Buf>) -> Pending {
        Pending {
            request,
            bufs,
            done: false,
        }
    }

    /// Whether the operation has completed (`MPI_Test`; also drives MPI's
    /// progress, which non-blocking collectives need).
    pub(crate) fn test(&mut self, op: &str) -> Result<bool> {
        if self.done {
            return Ok(true);
        }
        let mut flag: c_int = 0;
        // SAFETY: `request` is the live handle this Pending started (MPI
        // sets it to MPI_REQUEST_NULL when it completes, and a null request
        // tests as complete); STATUS_IGNORE is allowed.
        let rc = unsafe { ffi::MPI_Test(&mut self.request, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        check(op, "MPI_Test", rc)?;
        self.done = flag != 0;
        Ok(self.done)
    }

    /// The words a completed receive got.
    pub(crate) fn words(&self) -> Option<&[u64]> {
        match (self.done, self.bufs.first()) {
            (true, Some(Buf::U64(v))) => Some(v),
            _ => None,
        }
    }

    /// Cancels an unfinished receive and waits until MPI lets it go (a
    /// cancelled receive completes at once), so that nothing is left
    /// pending at `MPI_Finalize`.
    pub(crate) fn cancel(&mut self, op: &str) -> Result<()> {
        if self.done {
            return Ok(());
        }
        // SAFETY: `request` is the live handle this Pending started.
        let rc = unsafe { ffi::MPI_Cancel(&mut self.request) };
        check(op, "MPI_Cancel", rc)?;
        while !self.test(op)? {
            std::thread::yield_now();
        }
        Ok(())
    }

    /// The buffers of a completed operation, in the order given.
    pub(crate) fn into_buffers(mut self) -> Option<Vec<Buf>> {
        self.done.then(|| std::mem::take(&mut self.bufs))
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            // MPI may still write into them: leak, never free.
            std::mem::forget(std::mem::take(&mut self.bufs));
        }
    }
}
