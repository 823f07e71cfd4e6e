//! The thread's two switches: whether eager calls are recorded for
//! [`backward`](super::backward), and whether they run in training mode
//! (Dropout drops, BatchNorm uses the batch's statistics). Both are per
//! thread, so two threads recording at once never see each other's calls.

use std::cell::Cell;
use std::marker::PhantomData;

thread_local! {
    static RECORDING: Cell<bool> = const { Cell::new(false) };
    static TRAINING: Cell<bool> = const { Cell::new(false) };
}

/// Whether eager calls on this thread are recorded (default: no).
pub fn is_recording() -> bool {
    RECORDING.get()
}

/// Whether eager calls on this thread run in training mode (default: no).
pub fn is_training() -> bool {
    TRAINING.get()
}

/// Restores the thread's previous training mode when dropped.
#[must_use = "the mode reverts when the guard is dropped"]
#[derive(Debug)]
pub struct TrainingGuard {
    previous: bool,
    /// A mode belongs to its thread: the guard must drop where it was made.
    _thread: PhantomData<*const ()>,
}

impl TrainingGuard {
    /// Sets this thread's training mode to `training` until the guard drops.
    pub fn new(training: bool) -> TrainingGuard {
        TrainingGuard {
            previous: TRAINING.replace(training),
            _thread: PhantomData,
        }
    }
}

impl Drop for TrainingGuard {
    fn drop(&mut self) {
        TRAINING.set(self.previous);
    }
}

/// Restores the thread's previous recording and training modes when
/// dropped; see [`record`](super::record) and [`pause`](super::pause).
#[must_use = "the modes revert when the guard is dropped"]
#[derive(Debug)]
pub struct RecordingGuard {
    recording: bool,
    _training: TrainingGuard,
}

impl RecordingGuard {
    /// Sets this thread's recording and training modes until the guard drops.
    pub fn new(recording: bool, training: bool) -> RecordingGuard {
        RecordingGuard {
            recording: RECORDING.replace(recording),
            _training: TrainingGuard::new(training),
        }
    }
}

impl Drop for RecordingGuard {
    fn drop(&mut self) {
        RECORDING.set(self.recording);
    }
}
