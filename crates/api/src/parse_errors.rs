//! Requests that hyper cannot parse (bytes a URI may not hold, a URI of
//! 64 KiB or more, too many or too large headers) are answered by hyper
//! itself, before any layer of ours runs, with an empty body. Clients
//! should parse one error shape only, so the connection is wrapped in
//! [`ShapedErrors`], which gives such an answer the standard JSON body
//! (`{"error":{"code","message"}}`) on its way out.
//!
//! It recognises hyper's answer by its form: a 4xx status line with
//! `content-length: 0`. No response of the application has that form, since
//! [`crate::reject`] gives every error response it lets out a JSON body, so
//! nothing else is touched.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// A connection whose parse-error answers are given the error shape.
#[derive(Debug)]
pub struct ShapedErrors<IO> {
    inner: IO,
    /// A rewritten answer not yet written whole.
    pending: Vec<u8>,
    written: usize,
}

impl<IO> ShapedErrors<IO> {
    pub fn new(inner: IO) -> Self {
        ShapedErrors {
            inner,
            pending: Vec::new(),
            written: 0,
        }
    }

    pub fn get_ref(&self) -> &IO {
        &self.inner
    }
}

/// The stable code and message of a status hyper answers by itself.
fn explain(status: u16) -> Option<(&'static str, &'static str)> {
    Some(match status {
        400 => (
            "bad_request",
            "the request could not be parsed (a URI or header with bytes HTTP does not allow?)",
        ),
        414 => (
            "uri_too_long",
            "the request URI is too long; at most 8 KiB are accepted",
        ),
        431 => (
            "headers_too_large",
            "the request's headers are too many or too large",
        ),
        _ => return None,
    })
}

/// `head` (a whole response head that hyper wrote) with a JSON error body,
/// when it is one of hyper's own empty parse-error answers.
fn shape(head: &[u8]) -> Option<Vec<u8>> {
    let text = std::str::from_utf8(head).ok()?;
    let head_end = text.find("\r\n\r\n")?;
    if head_end + 4 != text.len() {
        return None;
    }
    let status: u16 = text.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    let (code, message) = explain(status)?;
    let mut lines: Vec<&str> = text[..head_end].split("\r\n").collect();
    let empty = lines
        .iter()
        .position(|l| l.eq_ignore_ascii_case("content-length: 0"))?;
    let body = serde_json::to_vec(&shepherd_protocol::ErrorBody {
        error: shepherd_protocol::ErrorDetail {
            code: code.to_owned(),
            message: message.to_owned(),
        },
    })
    .ok()?;
    let length = format!("content-length: {}", body.len());
    lines[empty] = &length;
    lines.insert(empty, "content-type: application/json");
    let mut out = lines.join("\r\n").into_bytes();
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&body);
    Some(out)
}

impl<IO: AsyncWrite + Unpin> ShapedErrors<IO> {
    /// Writes what is pending; ready once nothing is.
    fn drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.pending.len() {
            let n = std::task::ready!(
                Pin::new(&mut self.inner).poll_write(cx, &self.pending[self.written..])
            )?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.pending.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for ShapedErrors<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for ShapedErrors<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.drain(cx))?;
        // Only a short write that is a whole head can be hyper's answer;
        // the check costs a byte comparison for everything else.
        if buf.len() < 512 && buf.starts_with(b"HTTP/1.1 4") {
            if let Some(shaped) = shape(buf) {
                self.pending = shaped;
                // The caller's bytes are taken; the rewritten ones follow
                // at the next write, flush or shutdown.
                let _ = self.drain(cx)?;
                return Poll::Ready(Ok(buf.len()));
            }
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    /// Passed through, so that hyper writes a response's head and body
    /// chunks with one `writev` instead of first copying them all into one
    /// buffer: an event stream's frames go to every subscriber, and that
    /// copy was a sixth of a busy server's CPU.
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.drain(cx))?;
        let len: usize = bufs.iter().map(|b| b.len()).sum();
        let first = bufs.iter().find(|b| !b.is_empty());
        if len < 512 && first.is_some_and(|b| b.starts_with(b"HTTP/1.1 4")) {
            // Possibly hyper's own answer: looked at whole, as above.
            let whole: Vec<u8> = bufs.iter().flat_map(|b| b.iter().copied()).collect();
            return self.poll_write(cx, &whole);
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.drain(cx))?;
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hypers_empty_answers_get_the_error_shape() {
        let head = b"HTTP/1.1 414 URI Too Long\r\nconnection: close\r\ncontent-length: 0\r\ndate: Sat, 28 Nov 2026 10:17:20 GMT\r\n\r\n";
        let out = String::from_utf8(shape(head).unwrap()).unwrap();
        let (head, body) = out.split_once("\r\n\r\n").unwrap();
        assert!(head.starts_with("HTTP/1.1 414 URI Too Long\r\n"));
        assert!(head.contains("\r\ncontent-type: application/json\r\n"));
        assert!(head.contains(&format!("\r\ncontent-length: {}\r\n", body.len())));
        assert!(head.contains("connection: close"));
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["error"]["code"], "uri_too_long");
    }

    #[test]
    fn other_writes_are_left_alone() {
        // A response with a body, a success, a head followed by more bytes.
        for w in [
            &b"HTTP/1.1 400 Bad Request\r\ncontent-length: 10\r\n\r\n"[..],
            b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n",
            b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\nHTTP/1.1",
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
            b"{\"x\":1}",
        ] {
            assert!(shape(w).is_none(), "{}", String::from_utf8_lossy(w));
        }
    }

    #[tokio::test]
    async fn a_rewritten_answer_is_written_whole() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (client, server) = tokio::io::duplex(16);
        let mut shaped = ShapedErrors::new(server);
        let writer = tokio::spawn(async move {
            shaped
                .write_all(b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            shaped.shutdown().await.unwrap();
        });
        let mut got = String::new();
        let mut client = client;
        client.read_to_string(&mut got).await.unwrap();
        writer.await.unwrap();
        assert!(got.ends_with("\"}}"), "{got}");
        assert!(got.contains("\"code\":\"bad_request\""), "{got}");
    }

    #[tokio::test]
    async fn vectored_writes_pass_through_and_are_shaped_too() {
        use std::io::IoSlice;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        // Over TCP, as served, hyper is told it may write vectored.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let tcp = tokio::net::TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        assert!(ShapedErrors::new(tcp).is_write_vectored());

        let (client, server) = tokio::io::duplex(1 << 16);
        let mut shaped = ShapedErrors::new(server);
        let writer = tokio::spawn(async move {
            // A response head and two body chunks, written vectored.
            let mut parts = [
                IoSlice::new(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"),
                IoSlice::new(b"5\r\nhello\r\n"),
                IoSlice::new(b"0\r\n\r\n"),
            ];
            let mut left = &mut parts[..];
            while !left.is_empty() {
                let n = shaped.write_vectored(left).await.unwrap();
                IoSlice::advance_slices(&mut left, n);
            }
            // hyper's own empty answer, split over two slices.
            let answer =
                b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-length: 0\r\n\r\n";
            let (a, b) = answer.split_at(20);
            let n = shaped
                .write_vectored(&[IoSlice::new(a), IoSlice::new(b)])
                .await
                .unwrap();
            assert_eq!(n, answer.len());
            shaped.shutdown().await.unwrap();
        });
        let mut got = String::new();
        let mut client = client;
        client.read_to_string(&mut got).await.unwrap();
        writer.await.unwrap();
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "{got}");
        assert!(got.contains("5\r\nhello\r\n0\r\n\r\nHTTP/1.1 431"), "{got}");
        assert!(got.contains("\"code\":\"headers_too_large\""), "{got}");
    }
}
