//! `shepherd session …` and `shepherd attach`: sessions from the command
//! line, and a real terminal client for their PTY tabs (raw mode, resize on
//! SIGWINCH, detach with `Ctrl-]` then `d`), the way `tmux attach` works.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use futures::{SinkExt, StreamExt};
use shepherd_protocol::{
    AddWorker, ClientMessage, CreateSession, ErrorBody, ServerMessage, Session, SessionWorker,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::http::HeaderValue;
use tokio_tungstenite::tungstenite::Message;

use crate::cli::output::{client, explain, print_data};
use crate::cli::{Global, Output, Result};
use crate::render::table;

/// The key that starts the detach sequence (`Ctrl-]`), then `d`.
const DETACH_PREFIX: u8 = 0x1d;

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Create a session in an existing directory.
    New {
        /// The session's working directory.
        #[arg(long)]
        path: PathBuf,
        #[arg(long)]
        name: Option<String>,
    },
    /// List sessions and their tabs.
    List,
    /// Show one session and its tabs.
    Show { session: String },
    /// Delete a session, ending every process of it.
    Rm { session: String },
    /// Add a tab: `terminal`, `agent NAME` or `git-diff`.
    Add {
        session: String,
        /// terminal, agent or git-diff.
        #[arg(value_parser = ["terminal", "agent", "git-diff"])]
        kind: String,
        /// For `agent`: the name of an [agents.*] entry.
        agent: Option<String>,
        #[arg(long)]
        name: Option<String>,
    },
}

/// `shepherd attach SESSION WORKER`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    pub session: String,
    pub worker: String,
}

fn opt<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map(ToString::to_string).unwrap_or_default()
}

fn worker_rows(ws: &[SessionWorker]) -> Vec<Vec<String>> {
    ws.iter()
        .map(|w| {
            vec![
                w.id.clone(),
                w.kind.clone(),
                w.name.clone(),
                opt(&w.agent_id),
                opt(&w.pid),
                if w.alive { "yes" } else { "no" }.to_owned(),
            ]
        })
        .collect()
}

fn print_session(v: &Session) {
    println!(
        "session {}  {}  {}  (node {})",
        v.id, v.name, v.location_path, v.node_id
    );
    if !v.workers.is_empty() {
        print!(
            "{}",
            table(
                &["WORKER", "TYPE", "NAME", "AGENT", "PID", "ALIVE"],
                &worker_rows(&v.workers)
            )
        );
    }
}

pub async fn session(g: &Global, cmd: &SessionCommand) -> Result<()> {
    let c = client(g)?;
    let v = match cmd {
        SessionCommand::New { path, name } => {
            let abs = std::path::absolute(path)?;
            let body = CreateSession {
                location_path: abs.display().to_string(),
                name: name.clone(),
            };
            c.create_session(&body).await.map_err(explain)?
        }
        SessionCommand::List => {
            let v = c.sessions().await.map_err(explain)?;
            match g.output {
                Output::Table => {
                    let rows: Vec<Vec<String>> = v
                        .sessions
                        .iter()
                        .map(|x| {
                            vec![
                                x.id.clone(),
                                x.name.clone(),
                                x.workers.len().to_string(),
                                x.location_path.clone(),
                            ]
                        })
                        .collect();
                    print!("{}", table(&["SESSION", "NAME", "TABS", "PATH"], &rows));
                }
                Output::Json | Output::Yaml => print_data(g.output, &v),
            }
            return Ok(());
        }
        SessionCommand::Show { session } => c.session(session).await.map_err(explain)?,
        SessionCommand::Rm { session } => c.delete_session(session).await.map_err(explain)?,
        SessionCommand::Add {
            session,
            kind,
            agent,
            name,
        } => {
            let body = AddWorker {
                kind: kind.clone(),
                agent_id: agent.clone(),
                name: name.clone(),
            };
            let w = c
                .add_session_worker(session, &body)
                .await
                .map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &w),
                Output::Table => println!(
                    "added {} {} (attach: shepherd attach {session} {})",
                    w.kind, w.id, w.id
                ),
            }
            return Ok(());
        }
    };
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, &v),
        Output::Table => print_session(&v),
    }
    Ok(())
}

/// The terminal in raw mode while it lives; restored on drop.
struct RawMode(Option<libc::termios>);

impl RawMode {
    fn enter() -> RawMode {
        // SAFETY: tcgetattr/tcsetattr on stdin with a zeroed termios they fill.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(0, &mut t) != 0 {
                return RawMode(None); // not a terminal: pass bytes as they come
            }
            let saved = t;
            libc::cfmakeraw(&mut t);
            libc::tcsetattr(0, libc::TCSANOW, &t);
            RawMode(Some(saved))
        }
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            // SAFETY: restores the settings read in `enter`.
            unsafe {
                libc::tcsetattr(0, libc::TCSANOW, t);
            }
        }
    }
}

/// The terminal's size (cols, rows), if stdout is one.
fn window_size() -> Option<(u16, u16)> {
    // SAFETY: TIOCGWINSZ fills a winsize struct.
    unsafe {
        let mut w: libc::winsize = std::mem::zeroed();
        (libc::ioctl(1, libc::TIOCGWINSZ, &mut w) == 0 && w.ws_col > 0)
            .then_some((w.ws_col, w.ws_row))
    }
}

/// What typed bytes mean: to send, or a detach.
#[derive(Debug, Default)]
struct Keys {
    prefix: bool,
}

impl Keys {
    /// The bytes to send, and whether the detach sequence was typed.
    fn feed(&mut self, bytes: &[u8]) -> (Vec<u8>, bool) {
        let mut out = Vec::with_capacity(bytes.len());
        for &b in bytes {
            if self.prefix {
                self.prefix = false;
                if b == b'd' {
                    return (out, true);
                }
                out.push(DETACH_PREFIX);
                if b == DETACH_PREFIX {
                    continue; // Ctrl-] twice sends one
                }
                out.push(b);
            } else if b == DETACH_PREFIX {
                self.prefix = true;
            } else {
                out.push(b);
            }
        }
        (out, false)
    }
}

/// Either kind of connection under the WebSocket.
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// The WebSocket handshake's outcome: the socket, or the server's refusal.
type Handshake = std::result::Result<
    (
        tokio_tungstenite::WebSocketStream<Box<dyn Io>>,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    tokio_tungstenite::tungstenite::Error,
>;

/// Opens the WebSocket of `req`: over TLS for `wss://`, trusting what the
/// other verbs trust (the web roots and `SHEPHERD_CA_CERT`).
async fn connect(
    req: tokio_tungstenite::tungstenite::handshake::client::Request,
) -> Result<Handshake> {
    let uri = req.uri();
    let secure = uri.scheme_str() == Some("wss");
    let host = uri
        .host()
        .ok_or("the server address has no host")?
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_owned();
    let port = uri.port_u16().unwrap_or(if secure { 443 } else { 80 });
    let unreachable = |e: std::io::Error| format!("cannot reach the server at {host}:{port}: {e}");
    let tcp = tokio::net::TcpStream::connect((host.as_str(), port))
        .await
        .map_err(unreachable)?;
    // Keystrokes leave at once.
    tcp.set_nodelay(true)?;
    let io: Box<dyn Io> = if secure {
        let config = shepherd_client::Trust::from_env()
            .rustls_config()
            .map_err(|e| e.to_string())?;
        let name = tokio_rustls::rustls::pki_types::ServerName::try_from(host.clone())?;
        Box::new(
            tokio_rustls::TlsConnector::from(std::sync::Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(unreachable)?,
        )
    } else {
        Box::new(tcp)
    };
    Ok(tokio_tungstenite::client_async(req, io).await)
}

pub async fn attach(g: &Global, a: &AttachArgs) -> Result<()> {
    let url = format!(
        "{}/ws/session/{}/worker/{}",
        g.server
            .trim_end_matches('/')
            .replacen("http://", "ws://", 1)
            .replacen("https://", "wss://", 1),
        a.session,
        a.worker
    );
    let mut req = url.into_client_request()?;
    let token = g
        .token
        .clone()
        .or_else(|| crate::config::token_from_env(&|k| std::env::var(k).ok()));
    if let Some(t) = token {
        req.headers_mut().insert(
            "authorization",
            HeaderValue::from_str(&format!("Bearer {t}"))?,
        );
    }
    let (ws, _) = match connect(req).await? {
        Ok(x) => x,
        Err(tokio_tungstenite::tungstenite::Error::Http(res)) => {
            let status = res.status().as_u16();
            return Err(match res
                .body()
                .as_deref()
                .and_then(|b| serde_json::from_slice::<ErrorBody>(b).ok())
            {
                Some(b) => format!("{} ({}, HTTP {status})", b.error.message, b.error.code),
                None => format!("the server refused the connection (HTTP {status})"),
            }
            .into());
        }
        Err(e) => return Err(e.into()),
    };
    let (mut sink, mut stream) = ws.split();
    let raw = RawMode::enter();
    let mut stdout = tokio::io::stdout();
    let mut stdin = tokio::io::stdin();
    let mut winch = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::window_change())?;
    let resize = |cols: u16, rows: u16| {
        let m = ClientMessage::Resize { cols, rows };
        Message::Text(serde_json::to_string(&m).unwrap_or_default().into())
    };
    if let Some((c, r)) = window_size() {
        sink.send(resize(c, r)).await?;
    }
    let mut keys = Keys::default();
    let mut buf = vec![0u8; 4096];
    let mut seen_history = false;
    let mut stdin_open = true;
    let outcome: std::result::Result<String, String> = loop {
        tokio::select! {
            msg = stream.next() => {
                let Some(Ok(msg)) = msg else { break Ok("connection closed".into()) };
                let Message::Text(t) = msg else { continue };
                // A message this client does not know is skipped: newer
                // servers may add kinds.
                let Ok(m) = serde_json::from_str::<ServerMessage>(t.as_str()) else { continue };
                match m {
                    ServerMessage::History { data, .. } => {
                        if seen_history {
                            // A fresh history replaces the screen.
                            stdout.write_all(b"\x1b[2J\x1b[H").await?;
                        }
                        seen_history = true;
                        stdout.write_all(data.as_bytes()).await?;
                    }
                    ServerMessage::Output { data, .. } => stdout.write_all(data.as_bytes()).await?,
                    ServerMessage::Exit { exit_code, signal } => break Ok(format!("process exited (code {}, signal {})", opt(&exit_code), opt(&signal))),
                    ServerMessage::Error { message, .. } => break Err(message),
                    ServerMessage::Activity { .. } => {}
                }
                stdout.flush().await?;
            }
            n = stdin.read(&mut buf), if stdin_open => {
                let n = n?;
                if n == 0 {
                    stdin_open = false;
                    continue;
                }
                let (send, detach) = keys.feed(&buf[..n]);
                if !send.is_empty() {
                    sink.send(Message::Binary(send.into())).await?;
                }
                if detach {
                    break Ok("detached".into());
                }
            }
            _ = winch.recv() => {
                if let Some((c, r)) = window_size() {
                    sink.send(resize(c, r)).await?;
                }
            }
        }
    };
    let _ = sink.close().await;
    drop(raw);
    match outcome {
        Ok(why) => {
            eprintln!("\r\n[shepherd: {why}]");
            Ok(())
        }
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_bracket_then_d_detaches() {
        let mut k = Keys::default();
        assert_eq!(k.feed(b"ls\r"), (b"ls\r".to_vec(), false));
        assert_eq!(k.feed(&[b'a', DETACH_PREFIX]), (b"a".to_vec(), false));
        assert_eq!(k.feed(b"d"), (Vec::new(), true));
        let mut k = Keys::default();
        assert_eq!(
            k.feed(&[DETACH_PREFIX, b'x']),
            (vec![DETACH_PREFIX, b'x'], false)
        );
        assert_eq!(
            k.feed(&[DETACH_PREFIX, DETACH_PREFIX]),
            (vec![DETACH_PREFIX], false)
        );
    }
}
