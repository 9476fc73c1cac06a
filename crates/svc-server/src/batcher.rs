//! A bounded queue written out in batches by a background task: what the
//! request log (rows to the store) and the trace exporter (spans to an
//! OTLP receiver) share. Requests only push, which never waits: past the
//! capacity, items are dropped and counted, so a slow or hung destination
//! costs memory up to the bound and never a request's time. The bound is a
//! number of items, and for items of very different sizes (the response
//! cache's replies) also their total weight.

use std::collections::VecDeque;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// What became of a batch handed to the writer.
pub enum Written<T> {
    /// Delivered.
    Done,
    /// Not delivered, worth trying again: back to the queue's front (what
    /// no longer fits is dropped and counted).
    Retry(Vec<T>),
    /// Not delivered and given up: counted as dropped.
    Lost(usize),
}

/// The queue: at most `capacity` items (of at most `max_weight` together),
/// handed out `batch` at a time.
pub struct Batcher<T> {
    queue: Mutex<Queue<T>>,
    capacity: usize,
    max_weight: usize,
    weigh: fn(&T) -> usize,
    batch: usize,
    wake: Notify,
    dropped: AtomicU64,
}

struct Queue<T> {
    items: VecDeque<T>,
    /// The items' weight together.
    weight: usize,
}

impl<T> Batcher<T> {
    pub fn new(capacity: usize, batch: usize) -> Self {
        Batcher {
            queue: Mutex::new(Queue {
                items: VecDeque::new(),
                weight: 0,
            }),
            capacity,
            max_weight: usize::MAX,
            weigh: |_| 0,
            batch: batch.max(1),
            wake: Notify::new(),
            dropped: AtomicU64::new(0),
        }
    }

    /// This queue, holding items of at most `max_weight` together, each
    /// weighing what `weigh` says (an item heavier than that is dropped).
    pub fn weighed(self, max_weight: usize, weigh: fn(&T) -> usize) -> Self {
        Batcher {
            max_weight,
            weigh,
            ..self
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queue<T>> {
        // Pushing and draining leave no invariant a panic could break.
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `item` fits beside what `queue` holds; if so, counts it in.
    fn admit(&self, queue: &mut Queue<T>, item: &T) -> bool {
        let weight = queue.weight.saturating_add((self.weigh)(item));
        let fits = queue.items.len() < self.capacity && weight <= self.max_weight;
        if fits {
            queue.weight = weight;
        }
        fits
    }

    /// Items dropped so far: the queue was full, or the writer gave up.
    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    /// Items waiting.
    pub fn pending(&self) -> usize {
        self.lock().items.len()
    }

    fn count_dropped(&self, n: usize) {
        if n > 0 {
            self.dropped.fetch_add(n as u64, Ordering::Relaxed);
        }
    }

    /// Queues `items` as far as they fit (never waits); the oldest are
    /// kept. Wakes the writer once a batch is full.
    pub fn push(&self, items: impl IntoIterator<Item = T>) {
        let mut queue = self.lock();
        let mut lost = 0;
        for item in items {
            if self.admit(&mut queue, &item) {
                queue.items.push_back(item);
            } else {
                lost += 1;
            }
        }
        let full_batch = queue.items.len() >= self.batch;
        drop(queue);
        self.count_dropped(lost);
        if full_batch {
            self.wake.notify_one();
        }
    }

    /// Takes the next batch (empty when nothing waits).
    pub(crate) fn take(&self) -> Vec<T> {
        let mut queue = self.lock();
        let n = queue.items.len().min(self.batch);
        let batch: Vec<T> = queue.items.drain(..n).collect();
        let weight: usize = batch.iter().map(self.weigh).sum();
        queue.weight = queue.weight.saturating_sub(weight);
        batch
    }

    /// Puts a batch back in front, in its order, as far as it fits.
    fn put_back(&self, batch: Vec<T>) {
        let mut queue = self.lock();
        let mut lost = 0;
        for item in batch.into_iter().rev() {
            if self.admit(&mut queue, &item) {
                queue.items.push_front(item);
            } else {
                lost += 1;
            }
        }
        drop(queue);
        self.count_dropped(lost);
    }

    /// Hands one batch to `write`; returns whether it was delivered (an
    /// empty queue counts as delivered).
    async fn write_one<F, Fut>(&self, write: &mut F) -> bool
    where
        F: FnMut(Vec<T>) -> Fut,
        Fut: Future<Output = Written<T>>,
    {
        let batch = self.take();
        if batch.is_empty() {
            return true;
        }
        match write(batch).await {
            Written::Done => true,
            Written::Retry(batch) => {
                self.put_back(batch);
                false
            }
            Written::Lost(n) => {
                self.count_dropped(n);
                false
            }
        }
    }

    /// Hands what is queued to `write` every `every` (or as soon as a batch
    /// is full) until `stop`; then what is left, while batches are
    /// delivered (a destination that is down at shutdown loses the rest).
    pub async fn run<F, Fut>(
        self: Arc<Self>,
        every: Duration,
        stop: CancellationToken,
        mut write: F,
    ) where
        F: FnMut(Vec<T>) -> Fut,
        Fut: Future<Output = Written<T>>,
    {
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                () = self.wake.notified() => {}
                () = tokio::time::sleep(every) => {}
            }
            // A full queue is written out before the next sleep.
            while self.write_one(&mut write).await && self.pending() >= self.batch {}
        }
        while self.pending() > 0 && self.write_one(&mut write).await {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_queue_keeps_the_oldest_and_counts_the_rest() {
        let batcher = Batcher::new(2, 10);
        batcher.push([1, 2, 3]);
        batcher.push([4]);
        assert_eq!(batcher.pending(), 2);
        assert_eq!(batcher.dropped(), 2);
        assert_eq!(batcher.take(), [1, 2]);
    }

    #[test]
    fn a_weighed_queue_holds_at_most_its_weight() {
        let batcher = Batcher::new(100, 10).weighed(10, |s: &String| s.len());
        batcher.push(["aaaa".to_owned(), "bbbb".into(), "ccc".into(), "dd".into()]);
        // 4 + 4 fit, 3 more would pass 10, 2 more fit.
        assert_eq!(batcher.take(), ["aaaa", "bbbb", "dd"]);
        assert_eq!(batcher.dropped(), 1);
        // Taken out, their weight is free again.
        batcher.push(["x".repeat(10)]);
        assert_eq!(batcher.pending(), 1);
        batcher.push(["y".to_owned()]);
        assert_eq!(batcher.dropped(), 2);
    }

    #[test]
    fn a_batch_put_back_goes_first_in_its_order() {
        let batcher = Batcher::new(4, 2);
        batcher.push([1, 2, 3]);
        let batch = batcher.take();
        assert_eq!(batch, [1, 2]);
        batcher.push([4, 5]);
        batcher.put_back(batch);
        // 3, 4 and 5 queued; then 2 fits in front and 1 does not.
        assert_eq!(batcher.take(), [2, 3]);
        assert_eq!(batcher.take(), [4, 5]);
        assert_eq!(batcher.dropped(), 1);
    }

    #[tokio::test]
    async fn the_writer_gets_batches_and_what_is_left_at_shutdown() {
        let batcher = Arc::new(Batcher::new(100, 4));
        batcher.push(0..10);
        let stop = CancellationToken::new();
        stop.cancel();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        batcher
            .clone()
            .run(Duration::from_secs(60), stop, move |batch: Vec<i32>| {
                sink.lock().unwrap().push(batch);
                async { Written::Done }
            })
            .await;
        assert_eq!(
            *seen.lock().unwrap(),
            [vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]]
        );
        assert_eq!(batcher.pending(), 0);
    }

    #[tokio::test]
    async fn a_destination_down_at_shutdown_keeps_its_items_queued() {
        let batcher = Arc::new(Batcher::new(100, 4));
        batcher.push(0..6);
        let stop = CancellationToken::new();
        stop.cancel();
        let mut tries = 0;
        batcher
            .clone()
            .run(Duration::from_secs(60), stop, |batch: Vec<i32>| {
                tries += 1;
                async { Written::Retry(batch) }
            })
            .await;
        assert_eq!(tries, 1, "no retry loop against a dead destination");
        assert_eq!(batcher.pending(), 6);
        assert_eq!(batcher.dropped(), 0);
    }
}
