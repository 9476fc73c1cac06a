//! The queue between the async side and the engine thread, and admission.
//!
//! [`Shared`] holds the bounded queue of [`Job`]s the async side pushes to,
//! the holds, pauses and freezes of admission, and the counters; the
//! [`Batcher`]'s part here is which waiting job or suspended sequence takes
//! a free slot next, within owners' shares and the background work's slots
//! (see the parent module's docs). It decides only who goes next: where a
//! sequence's cells come from is `placement`'s, taking a slot back is
//! `suspend`'s.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};

use llama_cpp_2::context::LlamaContext;
use svc_core::engine::EngineError;

use crate::stats::Counters;

use super::sequence::Slot;
use super::{Batcher, Job};

/// State shared by the async side and the engine thread.
#[derive(Debug)]
pub(crate) struct Shared {
    queue: Mutex<Queue>,
    wake: Condvar,
    pub(crate) counters: Counters,
    queue_capacity: usize,
    parallel: u32,
    /// The most slots one owner's sequences hold while another owner's work
    /// waits (see [`Job::owner`]); 1 to `parallel`, as `LlamaEngineOptions::client_slots` gives it.
    pub(super) per_owner: usize,
    /// Sequences admitted now stop the engine at their first token (tests:
    /// see `LlamaEngine::freeze_at_first_token`).
    #[cfg(feature = "testing")]
    freeze_armed: std::sync::atomic::AtomicBool,
}

#[derive(Debug)]
pub(super) struct Queue {
    waiting: VecDeque<Job>,
    /// Slots with no sequence, as of the engine thread's last look.
    pub(super) free_slots: usize,
    /// No more jobs: the engine is dropped or its thread ended.
    closed: bool,
    /// Owners whose jobs are held back (see [`Shared::hold`]), once per hold.
    held: Vec<Arc<str>>,
    /// No job is admitted (tests: see `LlamaEngine::pause_admission`).
    pub(super) paused: bool,
    /// The engine thread is stopped for a [`Freeze`] (tests: see
    /// `LlamaEngine::freeze_at_first_token`).
    #[cfg(feature = "testing")]
    frozen: bool,
}

impl Shared {
    pub(crate) fn new(parallel: usize, queue_capacity: usize, per_owner: usize) -> Self {
        Shared {
            queue: Mutex::new(Queue {
                waiting: VecDeque::new(),
                free_slots: parallel,
                closed: false,
                held: Vec::new(),
                paused: false,
                #[cfg(feature = "testing")]
                frozen: false,
            }),
            wake: Condvar::new(),
            counters: Counters::default(),
            queue_capacity,
            parallel: u32::try_from(parallel).unwrap_or(u32::MAX),
            per_owner,
            #[cfg(feature = "testing")]
            freeze_armed: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Sequence slots.
    pub(crate) fn parallel(&self) -> u32 {
        self.parallel
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Queue> {
        // The queue holds no invariant a panic could break halfway.
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Queues `job`, or refuses it when the free slots and the queue are
    /// taken. A `continuation` (a later pass of a request that already ran
    /// one) goes first and is never refused for a full queue: the request
    /// was admitted already.
    pub(crate) fn submit(&self, job: Job, continuation: bool) -> Result<(), EngineError> {
        let mut queue = self.lock();
        if queue.closed {
            return Err(EngineError::Unavailable("the engine has stopped".into()));
        }
        if continuation {
            queue.waiting.push_front(job);
        } else if queue.waiting.len() >= queue.free_slots + self.queue_capacity {
            return Err(EngineError::Overloaded(format!(
                "{} requests are already waiting",
                queue.waiting.len()
            )));
        } else {
            queue.waiting.push_back(job);
        }
        drop(queue);
        self.wake.notify_one();
        Ok(())
    }

    /// Keeps the engine thread from admitting `owner`'s queued jobs until
    /// the guard drops, so that jobs queued meanwhile (the choices of one
    /// request) are admitted in one go, and those with the same prompt
    /// share its decoding (see [`Batcher::admit`]). Other owners' jobs go
    /// on being admitted.
    pub(crate) fn hold(self: &Arc<Self>, owner: Arc<str>) -> Hold {
        self.lock().held.push(Arc::clone(&owner));
        Hold(Arc::clone(self), owner)
    }

    /// Keeps the engine thread from admitting any job until the guard
    /// drops; jobs queued meanwhile are then admitted in one go, as far as
    /// slots and shares allow. For tests that need requests decoded
    /// together whatever the machine's timing.
    #[cfg(feature = "testing")]
    pub(crate) fn pause(self: &Arc<Self>) -> Pause {
        self.lock().paused = true;
        Pause(Arc::clone(self))
    }

    /// Stops the engine thread after the step in which a sequence admitted
    /// from now on produces its first token, and keeps it stopped (no
    /// admission, no decoding) until the guard drops: what a test does
    /// meanwhile (queue another request) happens, whatever the machine's
    /// timing, before that sequence's next token.
    #[cfg(feature = "testing")]
    pub(crate) fn freeze_at_first_token(self: &Arc<Self>) -> Freeze {
        self.freeze_armed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        Freeze(Arc::clone(self))
    }

    /// Whether a sequence admitted now stops the engine at its first token
    /// (see [`Self::freeze_at_first_token`]).
    pub(super) fn freezes_at_first_token(&self) -> bool {
        #[cfg(feature = "testing")]
        let armed = self.freeze_armed.load(std::sync::atomic::Ordering::SeqCst);
        #[cfg(not(feature = "testing"))]
        let armed = false;
        armed
    }

    /// Where the engine thread waits out a [`Freeze`]; `first_token`:
    /// whether the step just ended gave the first token of a sequence that
    /// stops it.
    pub(super) fn freeze_point(&self, first_token: bool) {
        #[cfg(feature = "testing")]
        if first_token {
            let mut queue = self.lock();
            // Checked under the lock, which the freeze's drop takes before
            // it wakes this thread: no wake-up is missed.
            while self.freezes_at_first_token() && !queue.closed {
                queue.frozen = true;
                queue = self
                    .wake
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            queue.frozen = false;
        }
        #[cfg(not(feature = "testing"))]
        let _ = first_token;
    }

    /// Requests waiting for a slot now.
    pub(crate) fn waiting(&self) -> usize {
        self.lock().waiting.len()
    }

    /// Stops the engine thread after its current step.
    pub(crate) fn close(&self) {
        self.lock().closed = true;
        self.wake.notify_all();
    }
}

/// A pause of all admission; see [`Shared::pause`].
#[cfg(feature = "testing")]
pub struct Pause(Arc<Shared>);

#[cfg(feature = "testing")]
impl Drop for Pause {
    fn drop(&mut self) {
        self.0.lock().paused = false;
        self.0.wake.notify_all();
    }
}

/// A freeze of the engine thread; see [`Shared::freeze_at_first_token`].
#[cfg(feature = "testing")]
pub struct Freeze(Arc<Shared>);

#[cfg(feature = "testing")]
impl Freeze {
    /// Waits until the engine thread has stopped (after a sequence's first
    /// token; a chat stream may not show that token's text before the
    /// next ones).
    ///
    /// # Panics
    /// When it has not stopped within a minute.
    pub async fn stopped(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while !self.0.lock().frozen {
            assert!(
                std::time::Instant::now() < deadline,
                "the engine never stopped"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
    }
}

#[cfg(feature = "testing")]
impl Drop for Freeze {
    fn drop(&mut self) {
        self.0
            .freeze_armed
            .store(false, std::sync::atomic::Ordering::SeqCst);
        drop(self.0.lock());
        self.0.wake.notify_all();
    }
}

/// A hold on admission; see [`Shared::hold`].
pub(crate) struct Hold(Arc<Shared>, Arc<str>);

impl Drop for Hold {
    fn drop(&mut self) {
        let mut queue = self.0.lock();
        if let Some(at) = queue.held.iter().position(|o| *o == self.1) {
            queue.held.swap_remove(at);
        }
        drop(queue);
        self.0.wake.notify_all();
    }
}

pub(super) struct CloseOnExit(pub(super) Arc<Shared>);

impl Drop for CloseOnExit {
    fn drop(&mut self) {
        let waiting = {
            let mut queue = self.0.lock();
            queue.closed = true;
            std::mem::take(&mut queue.waiting)
        };
        for job in waiting {
            let _ = job.sink.send(Err(stopped()));
        }
        self.0.counters.set_active(0);
    }
}

fn stopped() -> EngineError {
    EngineError::Unavailable("the engine has stopped".into())
}

impl Batcher<'_, '_> {
    /// Moves waiting jobs into free slots; waits when there is nothing to do.
    /// Returns false when the engine is closed.
    pub(super) fn admit(&mut self, ctx: &mut LlamaContext<'_>) -> bool {
        let mut queue = self.shared.lock();
        loop {
            if queue.closed {
                drop(queue);
                for i in 0..self.slots.len() {
                    if let Some(seq) = &self.slots[i].seq {
                        let _ = seq.sink.send(Err(stopped()));
                    }
                    self.release(i);
                }
                for suspended in std::mem::take(&mut self.suspended) {
                    let _ = suspended.seq.sink.send(Err(stopped()));
                    self.let_go(ctx, suspended.tokens.len(), suspended.cells);
                }
                return false;
            }
            let mut resumable = true;
            loop {
                // Suspended interactive work first, then queued jobs (a
                // background one only when no other may start), then
                // suspended background work.
                while self.slots.iter().any(Slot::is_free) {
                    if resumable && let Some(at) = self.next_suspended(&queue, false) {
                        resumable = self.resume(ctx, at);
                    } else if let Some(job) = self.next_job(&mut queue) {
                        self.place(ctx, job);
                    } else if resumable && let Some(at) = self.next_suspended(&queue, true) {
                        resumable = self.resume(ctx, at);
                    } else {
                        break;
                    }
                }
                if self.slots.iter().any(Slot::is_free) || !self.preempt(ctx, &queue) {
                    break;
                }
            }
            let free = self.slots.iter().filter(|s| s.is_free()).count();
            queue.free_slots = free;
            let active = self.slots.len() - free;
            self.shared.counters.set_active(active as u64);
            if active > 0 {
                return true;
            }
            queue = self
                .shared
                .wake
                .wait(queue)
                .unwrap_or_else(PoisonError::into_inner);
        }
    }

    /// The first waiting job that may start now: not held, and of an owner
    /// below its share of the slots; a background job only when no other
    /// may start and fewer than [`Self::background_slots`] run. Jobs whose
    /// client went away are dropped on the way.
    fn next_job(&mut self, queue: &mut Queue) -> Option<Job> {
        if queue.paused {
            return None;
        }
        let room_in_background = self.room_in_background();
        let mut background = None;
        let mut at = 0;
        while at < queue.waiting.len() {
            let job = &queue.waiting[at];
            if job.sink.is_closed() {
                queue.waiting.remove(at);
                self.shared.counters.cancelled();
                continue;
            }
            let may_start = self.may_take(queue, job.owner.as_ref());
            if may_start && !job.background {
                return queue.waiting.remove(at);
            }
            if may_start && room_in_background && background.is_none() {
                background = Some(at);
            }
            at += 1;
        }
        background.and_then(|at| queue.waiting.remove(at))
    }

    /// Whether a sequence of `owner` may take a free slot now: one of no
    /// owner always; else when the owner is not held and holds less than
    /// its share, or more while no other owner's work waits that could start
    /// within its own share (a client alone takes every slot). Beyond the
    /// share only where sequences can be suspended (KV cells, not
    /// recurrent state): another owner's job must be able to take a slot back.
    fn may_take(&self, queue: &Queue, owner: Option<&Arc<str>>) -> bool {
        let Some(owner) = owner else {
            return true;
        };
        !queue.held.contains(owner)
            && (self.running(owner) < self.shared.per_owner
                || (self.cell_memory && !self.others_wait(queue, owner)))
    }

    /// Whether a sequence or interactive job of another owner than `owner`
    /// waits that may start within its share.
    fn others_wait(&self, queue: &Queue, owner: &Arc<str>) -> bool {
        self.claimants(queue)
            .any(|claimant| claimant.is_none_or(|other| other != owner))
    }

    /// The owners (`None`: no owner) of the waiting work that may take a
    /// slot within its share: suspended sequences first, then queued
    /// interactive jobs, in order.
    pub(super) fn claimants<'q>(
        &'q self,
        queue: &'q Queue,
    ) -> impl Iterator<Item = Option<&'q Arc<str>>> {
        let suspended = self
            .suspended
            .iter()
            .map(|s| (s.seq.background, s.seq.owner.as_ref()));
        let queued = queue
            .waiting
            .iter()
            .filter(|job| !job.sink.is_closed())
            .map(|job| (job.background, job.owner.as_ref()));
        suspended
            .chain(queued)
            .filter(|(background, _)| !background)
            .map(|(_, owner)| owner)
            .filter(|owner| {
                owner.is_none_or(|owner| {
                    !queue.held.contains(owner) && self.running(owner) < self.shared.per_owner
                })
            })
    }

    /// Whether fewer than [`Self::background_slots`] background sequences run.
    fn room_in_background(&self) -> bool {
        self.slots
            .iter()
            .filter_map(|s| s.seq.as_ref())
            .filter(|s| s.background)
            .count()
            < self.background_slots()
    }

    /// The first suspended sequence that may take a free slot now: of
    /// interactive work, or (`background`) of background work, within the
    /// background's slots, as for a queued job.
    fn next_suspended(&self, queue: &Queue, background: bool) -> Option<usize> {
        if queue.paused || (background && !self.room_in_background()) {
            return None;
        }
        self.suspended.iter().position(|s| {
            s.seq.background == background && self.may_take(queue, s.seq.owner.as_ref())
        })
    }

    /// The most slots background jobs hold at once: half (at least one),
    /// so that the others are free for interactive requests as they come.
    fn background_slots(&self) -> usize {
        (self.slots.len() / 2).max(1)
    }

    /// Slots `owner`'s sequences hold.
    pub(super) fn running(&self, owner: &Arc<str>) -> usize {
        self.slots
            .iter()
            .filter_map(|s| s.seq.as_ref())
            .filter(|s| s.owner.as_ref() == Some(owner))
            .count()
    }
}
