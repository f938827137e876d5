//! A connection whose writes may not stall for long: a client that sends requests (pipelined,
//! say) and never reads the answers shuts its receive window, and every write to it then
//! waits. [`Bounded`] fails such a write once it has made no progress for its time, and the
//! HTTP layer then closes the connection, so that the client holds no connection's place, and
//! no answer's memory, for longer than that. Reads are not bounded here: the HTTP layer bounds
//! the time a request's head may take, and the server a body's.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Sleep;

/// `S`, whose writes, flushes and shutdown fail with [`io::ErrorKind::TimedOut`] once they
/// have made no progress for `limit`.
pub struct Bounded<S> {
    inner: S,
    limit: Duration,
    /// Set when a write first waited, cleared when one makes progress: the moment past which
    /// a write that still waits fails.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl<S> Bounded<S> {
    pub fn new(inner: S, limit: Duration) -> Bounded<S> {
        Bounded {
            inner,
            limit,
            stalled: None,
        }
    }

    /// What a write-side call `polled` answered, judged: done (progress, the clock cleared),
    /// waiting (the clock started, or still running), or failed once the clock has run out.
    fn judge<T>(
        &mut self,
        cx: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        if polled.is_ready() {
            self.stalled = None;
            return polled;
        }
        let limit = self.limit;
        let clock = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match clock.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!(
                    "the client read nothing of its answers for {} s",
                    limit.as_secs()
                ),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Bounded<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Bounded<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.judge(cx, polled)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.judge(cx, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.judge(cx, polled)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.judge(cx, polled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn a_write_that_waits_past_the_limit_fails_and_progress_restarts_the_clock() {
        // A pipe that holds 16 bytes: the far end reads nothing until told.
        let (near, mut far) = tokio::io::duplex(16);
        let mut bounded = Bounded::new(near, Duration::from_secs(10));
        bounded.write_all(&[1; 16]).await.expect("fits");
        // Full: the next write waits, then fails after 10 s of no progress.
        let started = tokio::time::Instant::now();
        let stalled = bounded.write_all(&[2; 8]).await.expect_err("stalled");
        assert_eq!(stalled.kind(), io::ErrorKind::TimedOut);
        assert_eq!(started.elapsed(), Duration::from_secs(10));

        // Progress within the limit, however slow overall, is never cut.
        let (near, mut far2) = tokio::io::duplex(16);
        let mut bounded = Bounded::new(near, Duration::from_secs(10));
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut buf = [0; 8];
            while got.len() < 64 {
                tokio::time::sleep(Duration::from_secs(9)).await;
                let n = far2.read(&mut buf).await.expect("read");
                got.extend_from_slice(&buf[..n]);
            }
            got
        });
        bounded.write_all(&[3; 64]).await.expect("slow but moving");
        bounded.flush().await.expect("flushed");
        assert_eq!(reader.await.expect("the reader").len(), 64);
        let mut buf = [0; 16];
        assert_eq!(far.read(&mut buf).await.expect("read"), 16);
    }
}
