//! A `multipart/form-data` upload streamed through a [`Receiving`]: the
//! handler's task only forwards the body's chunks, and the receiver parses
//! them ([`crate::multipart`]), checks them and writes them to disk on
//! blocking threads, so that a hostile body costs the async threads
//! nothing else and no upload is ever whole in memory. `POST /v1/files`
//! and the audio uploads receive their forms this way.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::body::Body;
use futures::{FutureExt as _, StreamExt as _};

use crate::error::ApiError;
use crate::multipart::FormError;
use crate::ratelimit::InFlightPlace;

impl From<FormError> for ApiError {
    fn from(e: FormError) -> Self {
        ApiError::InvalidBody {
            param: None,
            message: format!("The multipart/form-data body cannot be read: {e}."),
        }
    }
}

/// A form being received on blocking threads: fed the body's chunks a
/// batch at a time, then finished when the body ends. Dropping it gives up
/// (its temporary files are removed).
pub(crate) trait Receiving: Send + 'static {
    /// What a whole, right form becomes.
    type Received: Send + 'static;
    /// Takes the body's next chunks.
    fn feed(&mut self, chunks: &[bytes::Bytes]) -> Result<(), ApiError>;
    /// The body ended.
    fn finish(self) -> Result<Self::Received, ApiError>;
}

/// The most bytes of body handed to one piece of work.
const PIECE_BYTES: usize = 256 * 1024;

/// Streams `body` through `receiver`: this task only forwards the body's
/// chunks, the received ones at a time (up to [`PIECE_BYTES`]), and each
/// batch is parsed, checked and written on a blocking thread in a turn of
/// the uploads' (see [`crate::ratelimit::InFlight`]). A body past `limit`
/// is a 413.
pub(crate) async fn receive<R: Receiving>(
    place: &InFlightPlace<'_>,
    mut receiver: R,
    body: Body,
    limit: usize,
) -> Result<R::Received, ApiError> {
    let mut body = body.into_data_stream();
    let mut received = 0usize;
    let mut ended = false;
    while !ended {
        let mut chunks = Vec::new();
        let mut size = 0;
        let mut next = body.next().await;
        loop {
            match next {
                Some(Ok(chunk)) => {
                    size += chunk.len();
                    chunks.push(chunk);
                }
                Some(Err(e)) => {
                    give_up(place, receiver).await;
                    return Err(body_error(&e));
                }
                None => {
                    ended = true;
                    break;
                }
            }
            if size >= PIECE_BYTES {
                break;
            }
            match body.next().now_or_never() {
                Some(chunk) => next = chunk,
                None => break,
            }
        }
        received = received.saturating_add(size);
        if received > limit {
            give_up(place, receiver).await;
            return Err(ApiError::PayloadTooLarge { limit });
        }
        if !chunks.is_empty() {
            receiver = place
                .work(move || receiver.feed(&chunks).map(|()| receiver))
                .await??;
        }
    }
    place.work(move || receiver.finish()).await?
}

/// Drops `receiver` (its temporary file) off the async threads.
async fn give_up<R: Receiving>(place: &InFlightPlace<'_>, receiver: R) {
    let _ = place.work(move || drop(receiver)).await;
}

/// A body that could not be read: too slow, or cut off.
fn body_error(e: &axum::Error) -> ApiError {
    match crate::body::body_timed_out(e) {
        Some(timed_out) => ApiError::BodyTimeout(timed_out),
        None => ApiError::InvalidBody {
            param: None,
            message: format!("The multipart/form-data body cannot be read: {e}."),
        },
    }
}

/// The bytes that uploads in progress (files and audio) hold on disk, all
/// keys together, bounded by `uploads_disk_bytes`. Each key has at most a
/// few uploads in flight, each bounded by its route's largest file; this
/// bounds their sum, so that many keys uploading at once cannot fill the
/// disk. An upload past it is refused with a 503 (retry shortly), its part
/// written so far removed.
#[derive(Debug, Clone)]
pub(crate) struct Spool(Arc<SpoolBytes>);

#[derive(Debug)]
struct SpoolBytes {
    held: AtomicUsize,
    limit: usize,
}

impl Spool {
    pub(crate) fn new(limit: usize) -> Self {
        Spool(Arc::new(SpoolBytes {
            held: AtomicUsize::new(0),
            limit,
        }))
    }

    /// A new upload's share, empty until it writes.
    pub(crate) fn share(&self) -> Spooled {
        Spooled {
            spool: self.clone(),
            bytes: 0,
        }
    }

    /// Bytes held now, all uploads together.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.0.held.load(Ordering::Relaxed)
    }
}

/// What one upload holds of the [`Spool`]; given back when dropped (when
/// its file is removed, or kept as a file of its project).
#[derive(Debug)]
pub(crate) struct Spooled {
    spool: Spool,
    bytes: usize,
}

impl Spooled {
    /// Counts `n` more bytes about to be written; an error, nothing
    /// counted, when they would take the uploads past the limit.
    pub(crate) fn grow(&mut self, n: usize) -> Result<(), ApiError> {
        let SpoolBytes { held, limit } = &*self.spool.0;
        held.fetch_update(Ordering::AcqRel, Ordering::Acquire, |now| {
            now.checked_add(n).filter(|after| after <= limit)
        })
        .map_err(|_| ApiError::UploadSpaceFull { limit: *limit })?;
        self.bytes += n;
        Ok(())
    }
}

impl Drop for Spooled {
    fn drop(&mut self) {
        self.spool.0.held.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uploads_share_the_spool_and_give_it_back_when_done() {
        let spool = Spool::new(100);
        let mut a = spool.share();
        let mut b = spool.share();
        assert!(a.grow(60).is_ok());
        assert!(b.grow(40).is_ok());
        assert!(matches!(
            b.grow(1),
            Err(ApiError::UploadSpaceFull { limit: 100 })
        ));
        assert_eq!(spool.held(), 100);
        drop(a);
        assert_eq!(spool.held(), 40);
        assert!(b.grow(60).is_ok());
        drop(b);
        assert_eq!(spool.held(), 0);
    }
}
