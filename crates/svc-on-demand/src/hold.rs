//! One request's hold on a loaded model: the model is not unloaded while a
//! hold lasts, and the pool can end it — when it has kept the model past
//! `max_hold` while another model waited for the room, or when the admin
//! API forces an unload. An ended request gets the pool's error: a call
//! answered in one piece at once, a stream as its next item (its engine
//! work is dropped at once, whether or not the client reads).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};

use futures::stream::BoxStream;
use futures::task::AtomicWaker;
use futures::{Stream, StreamExt};
use svc_core::engine::EngineError;
use tokio::sync::Notify;

use super::InFlight;

fn locked<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What an ended stream drops: its engine's work.
type Stop = Box<dyn FnOnce() + Send>;

/// A running request's hold on its model (see the module's docs).
pub(super) struct Hold {
    /// Why the pool ended the request; `None` while it may run.
    ended: Mutex<Option<EngineError>>,
    /// Drops what the request streams, when it is ended.
    stop: Mutex<Option<Stop>>,
    /// Its count in the model's requests in flight, given back when the
    /// request ends or is ended.
    guard: Mutex<Option<InFlight>>,
    /// Wakes a call answered in one piece when it is ended.
    notify: Notify,
    /// Wakes a stream when it is ended.
    waker: AtomicWaker,
}

impl Hold {
    pub(super) fn new(guard: InFlight) -> Self {
        Hold {
            ended: Mutex::new(None),
            stop: Mutex::new(None),
            guard: Mutex::new(Some(guard)),
            notify: Notify::new(),
            waker: AtomicWaker::new(),
        }
    }

    /// Ends the request with `why`: its engine work is dropped and the
    /// model given back now. Never called with the pool's state locked
    /// (giving the model back locks it).
    pub(super) fn end(&self, why: EngineError) {
        locked(&self.ended).get_or_insert(why);
        let stop = locked(&self.stop).take();
        if let Some(stop) = stop {
            stop();
        }
        self.release();
        self.notify.notify_waiters();
        self.waker.wake();
    }

    /// Whether it still counts in its model's requests in flight: not
    /// ended, nor done.
    pub(super) fn counted(&self) -> bool {
        locked(&self.guard).is_some()
    }

    /// Whether the pool ended the request.
    pub(super) fn is_ended(&self) -> bool {
        self.why().is_some()
    }

    /// Why the request was ended, if it was.
    fn why(&self) -> Option<EngineError> {
        locked(&self.ended).clone()
    }

    /// Gives the model back (the request is done with it).
    fn release(&self) {
        let guard = locked(&self.guard).take();
        drop(guard);
    }

    /// Once the request is ended: why.
    async fn ended(&self) -> EngineError {
        loop {
            let notified = self.notify.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if let Some(why) = self.why() {
                return why;
            }
            notified.await;
        }
    }

    /// `work` (a call answered in one piece), or the pool's error once the
    /// request is ended first.
    pub(super) async fn run<T>(
        &self,
        work: impl Future<Output = Result<T, EngineError>>,
    ) -> Result<T, EngineError> {
        tokio::select! {
            biased;
            why = self.ended() => Err(why),
            done = work => done,
        }
    }
}

/// What an engine streams: a generation's events, speech's audio.
type Items<T> = BoxStream<'static, Result<T, EngineError>>;

/// A stream that holds its model until it ends, is dropped, or is ended
/// by the pool (then its last item is the pool's error).
pub(super) struct Guarded<T> {
    /// Shared with the hold's stop, which drops them.
    items: Arc<Mutex<Option<Items<T>>>>,
    hold: Arc<Hold>,
    done: bool,
}

impl<T: Send + 'static> Guarded<T> {
    /// `items` under `hold`: ending the hold drops them.
    pub(super) fn new(items: Items<T>, hold: Arc<Hold>) -> Self {
        let items = Arc::new(Mutex::new(Some(items)));
        let dropped = Arc::clone(&items);
        *locked(&hold.stop) = Some(Box::new(move || {
            let items = locked(&dropped).take();
            drop(items);
        }));
        Guarded {
            items,
            hold,
            done: false,
        }
    }

    /// Ends the stream with the pool's error.
    fn ended(&mut self, why: EngineError) -> Poll<Option<Result<T, EngineError>>> {
        self.done = true;
        let items = locked(&self.items).take();
        drop(items);
        self.hold.release();
        Poll::Ready(Some(Err(why)))
    }
}

impl<T: Send + 'static> Stream for Guarded<T> {
    type Item = Result<T, EngineError>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(None);
        }
        this.hold.waker.register(cx.waker());
        if let Some(why) = this.hold.why() {
            return this.ended(why);
        }
        let polled = match locked(&this.items).as_mut() {
            Some(items) => items.poll_next_unpin(cx),
            None => Poll::Ready(None),
        };
        let item = std::task::ready!(polled);
        if item.is_none() {
            // Its items may have been dropped because it was ended.
            if let Some(why) = this.hold.why() {
                return this.ended(why);
            }
            this.done = true;
            this.hold.release();
        }
        Poll::Ready(item)
    }
}
