//! `shepherd session …` and `shepherd attach`: sessions from the command
//! line, and a real terminal client for their PTY tabs (raw mode, resize on
//! SIGWINCH, detach with `Ctrl-]` then `d`), the way `tmux attach` works.

use std::path::PathBuf;

use clap::{Args, Subcommand};
use clap_complete::ArgValueCandidates;
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

/// After piped input ends, how long the tab may stay silent before attach
/// exits: long enough for a command's answer to start arriving.
const END_OF_INPUT_QUIET: std::time::Duration = std::time::Duration::from_millis(700);

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Create a session in an existing directory.
    New {
        /// The session's working directory.
        #[arg(long)]
        path: PathBuf,
        /// A name to find it by (default: the directory's name).
        #[arg(long)]
        name: Option<String>,
        /// The host it lives on (an id from `shepherd hosts`; default: the
        /// server node). The path is then one on that host, and absolute.
        #[arg(long)]
        host: Option<String>,
    },
    /// List sessions and their tabs.
    List,
    /// Show one session and its tabs.
    Show {
        /// The session's id.
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::sessions))]
        session: String,
    },
    /// Delete a session, ending every process of it.
    Rm {
        /// The session's id.
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::sessions))]
        session: String,
    },
    /// Add a tab: `terminal`, `agent NAME` or `git-diff`.
    Add {
        /// The session's id.
        #[arg(add = ArgValueCandidates::new(crate::cli::completion::sessions))]
        session: String,
        /// terminal, agent or git-diff.
        #[arg(value_parser = ["terminal", "agent", "git-diff"])]
        kind: String,
        /// For `agent`: the name of an [agents.*] entry.
        agent: Option<String>,
        /// The tab's title (default: its kind, or the agent's name).
        #[arg(long)]
        name: Option<String>,
    },
}

/// `shepherd attach [SESSION [TAB]]`.
#[derive(Debug, Args)]
pub struct AttachArgs {
    /// The session: its id, a unique start of its id, or its name. Without
    /// it, the sessions and their tabs are listed to pick from.
    #[arg(add = ArgValueCandidates::new(crate::cli::completion::sessions))]
    pub session: Option<String>,
    /// The terminal or agent tab: its id, a unique start of it, or its name.
    /// May be left out when the session has exactly one such tab.
    #[arg(value_name = "TAB")]
    pub worker: Option<String>,
}

/// Whether a tab has a terminal to attach to (`git-diff` tabs do not).
fn is_pty(w: &SessionWorker) -> bool {
    w.kind != "git-diff"
}

/// The one item `wanted` names: by exact id, exact name, or a unique start
/// of an id. `what` names the kind of item in errors.
fn pick_one<'a, T>(
    items: &'a [T],
    wanted: &str,
    what: &str,
    id: impl Fn(&T) -> &str,
    name: impl Fn(&T) -> &str,
) -> std::result::Result<&'a T, String> {
    if let Some(x) = items.iter().find(|x| id(x) == wanted) {
        return Ok(x);
    }
    let named: Vec<&T> = items.iter().filter(|x| name(x) == wanted).collect();
    match named.as_slice() {
        [one] => return Ok(one),
        [] => {}
        many => {
            let ids: Vec<&str> = many.iter().map(|x| id(x)).collect();
            return Err(format!(
                "{} {what}s are named {wanted:?} ({}): give an id",
                many.len(),
                ids.join(", ")
            ));
        }
    }
    let prefixed: Vec<&T> = items.iter().filter(|x| id(x).starts_with(wanted)).collect();
    match prefixed.as_slice() {
        [one] => Ok(one),
        [] => Err(format!("no {what} has the id or name {wanted:?}")),
        many => {
            let ids: Vec<&str> = many.iter().map(|x| id(x)).collect();
            Err(format!(
                "{wanted:?} starts {} {what} ids ({}): give more of it",
                many.len(),
                ids.join(", ")
            ))
        }
    }
}

/// The sessions and their terminal and agent tabs, as `attach` with no
/// arguments shows them.
fn print_pickable(sessions: &[Session]) {
    if sessions.is_empty() {
        println!("no sessions yet: make one with `shepherd session new --path DIR`");
        return;
    }
    let rows: Vec<Vec<String>> = sessions
        .iter()
        .flat_map(|s| {
            let tabs: Vec<&SessionWorker> = s.workers.iter().filter(|w| is_pty(w)).collect();
            if tabs.is_empty() {
                return vec![vec![
                    s.id.clone(),
                    s.name.clone(),
                    "-".into(),
                    "(no terminal or agent tab)".into(),
                    String::new(),
                ]];
            }
            tabs.into_iter()
                .map(|w| {
                    vec![
                        s.id.clone(),
                        s.name.clone(),
                        w.id.clone(),
                        format!("{} {}", w.kind, w.name),
                        if w.alive { "running" } else { "stopped" }.into(),
                    ]
                })
                .collect()
        })
        .collect();
    print!(
        "{}",
        table(&["SESSION", "NAME", "TAB", "WHAT", "PROCESS"], &rows)
    );
    println!("attach: shepherd attach SESSION [TAB]  (an id, a unique start of one, or a name)");
}

/// The session and tab `a` names, or `None` when it names none and the
/// choices were printed.
async fn resolve(
    c: &shepherd_client::Client,
    a: &AttachArgs,
) -> Result<Option<(Session, SessionWorker)>> {
    let list = c.sessions().await.map_err(explain)?;
    let Some(wanted) = &a.session else {
        print_pickable(&list.sessions);
        return Ok(None);
    };
    let session = pick_one(&list.sessions, wanted, "session", |s| &s.id, |s| &s.name)?.clone();
    let ptys: Vec<SessionWorker> = session
        .workers
        .iter()
        .filter(|w| is_pty(w))
        .cloned()
        .collect();
    let tab = match &a.worker {
        Some(wanted) => {
            let w = pick_one(&session.workers, wanted, "tab", |w| &w.id, |w| &w.name)?;
            if !is_pty(w) {
                return Err(format!(
                    "tab {} of session {} is a {} tab: it has no terminal to attach to",
                    w.id, session.name, w.kind
                )
                .into());
            }
            w.clone()
        }
        None => match ptys.as_slice() {
            [one] => one.clone(),
            [] => {
                return Err(format!(
                    "session {} has no terminal or agent tab: add one with \
`shepherd session add {} terminal`",
                    session.name, session.id
                )
                .into())
            }
            many => {
                let names: Vec<String> = many
                    .iter()
                    .map(|w| format!("{} ({} {})", w.id, w.kind, w.name))
                    .collect();
                return Err(format!(
                    "session {} has {} tabs to attach to; name one: {}",
                    session.name,
                    many.len(),
                    names.join(", ")
                )
                .into());
            }
        },
    };
    Ok(Some((session, tab)))
}

/// What a refused WebSocket handshake means, from the server's error body
/// when it came with the response, and from the session otherwise.
fn refusal(status: u16, body: Option<&[u8]>, session: &Session, tab: &SessionWorker) -> String {
    let body: Option<serde_json::Value> = body.and_then(|b| serde_json::from_slice(b).ok());
    let error = body
        .as_ref()
        .and_then(|b| serde_json::from_value::<ErrorBody>(b.clone()).ok());
    let code = error.as_ref().map(|e| e.error.code.clone());
    if code.as_deref() == Some("session_on_other_node") || (code.is_none() && status == 409) {
        let address = body
            .as_ref()
            .and_then(|b| b.get("address"))
            .and_then(|a| a.as_str())
            .map(str::to_owned)
            .or_else(|| session.node_address.clone());
        return match address {
            Some(addr) => format!(
                "session {} runs on node {} (session_on_other_node): attach through that node, \
`shepherd attach --server {addr} {} {}`",
                session.name, session.node_id, session.id, tab.id
            ),
            None => format!(
                "session {} runs on node {}, which has not said where it is reached \
(session_on_other_node): attach through that node",
                session.name, session.node_id
            ),
        };
    }
    match error {
        Some(b) => format!("{} ({}, HTTP {status})", b.error.message, b.error.code),
        None => format!(
            "the server refused to attach to tab {} (HTTP {status})",
            tab.id
        ),
    }
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
        "session {}  {}  {}  (host {})",
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
        SessionCommand::New { path, name, host } => {
            // A path on another host is that host's to resolve.
            let location = match host {
                Some(_) => path.clone(),
                None => std::path::absolute(path)?,
            };
            let body = CreateSession {
                location_path: location.display().to_string(),
                name: name.clone(),
                host: host.clone(),
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
    /// Whether stdin is a terminal (and so in raw mode now).
    fn is_terminal(&self) -> bool {
        self.0.is_some()
    }

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
    let Some((session, tab)) = resolve(&client(g)?, a).await? else {
        return Ok(());
    };
    let url = format!(
        "{}/ws/session/{}/worker/{}",
        g.server
            .trim_end_matches('/')
            .replacen("http://", "ws://", 1)
            .replacen("https://", "wss://", 1),
        session.id,
        tab.id
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
            return Err(refusal(status, res.body().as_deref(), &session, &tab).into());
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
    // Piped input (`echo ls | shepherd attach …`) ends: then what it made
    // the tab print is shown until the tab falls quiet, and attach exits.
    let interactive = raw.is_terminal();
    let quiet = tokio::time::sleep(std::time::Duration::from_secs(3600));
    tokio::pin!(quiet);
    let outcome: std::result::Result<String, String> = loop {
        tokio::select! {
            () = &mut quiet, if !stdin_open && !interactive => break Ok("end of input".into()),
            msg = stream.next() => {
                let Some(Ok(msg)) = msg else { break Ok("connection closed".into()) };
                if !stdin_open {
                    quiet.as_mut().reset(tokio::time::Instant::now() + END_OF_INPUT_QUIET);
                }
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
                    quiet.as_mut().reset(tokio::time::Instant::now() + END_OF_INPUT_QUIET);
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

    fn session_on(node_address: Option<&str>) -> (Session, SessionWorker) {
        let tab = SessionWorker {
            id: "wk_1".into(),
            kind: "terminal".into(),
            name: "Terminal".into(),
            agent_id: None,
            created_at: String::new(),
            pid: None,
            alive: true,
            epoch: 1,
            exit_code: None,
            exited_at: None,
        };
        let session = Session {
            id: "ses_1".into(),
            name: "proj".into(),
            location_path: "/src/proj".into(),
            created_at: String::new(),
            node_id: "node-b".into(),
            node_address: node_address.map(str::to_owned),
            workers: vec![tab.clone()],
        };
        (session, tab)
    }

    #[test]
    fn a_session_on_another_node_names_the_node_to_attach_through() {
        let (session, tab) = session_on(None);
        let body = br#"{"error":{"code":"session_on_other_node","message":"elsewhere"},"node_id":"node-b","address":"http://10.0.0.2:7700"}"#;
        let text = refusal(409, Some(body), &session, &tab);
        assert!(
            text.contains("node-b")
                && text.contains("--server http://10.0.0.2:7700 ses_1 wk_1")
                && text.contains("session_on_other_node"),
            "{text}"
        );
        // No body with the handshake's answer: the session says where.
        let (session, tab) = session_on(Some("http://10.0.0.3:7700"));
        let text = refusal(409, None, &session, &tab);
        assert!(text.contains("--server http://10.0.0.3:7700"), "{text}");
        let text = refusal(
            422,
            Some(br#"{"error":{"code":"not_a_terminal","message":"a git-diff tab"}}"#),
            &session,
            &tab,
        );
        assert_eq!(text, "a git-diff tab (not_a_terminal, HTTP 422)");
    }

    #[test]
    fn names_ids_and_unique_starts_pick_one() {
        let items = [("ses_abc", "api"), ("ses_abd", "web"), ("ses_x", "web")];
        let pick = |w: &str| pick_one(&items, w, "session", |x| x.0, |x| x.1).map(|x| x.0);
        assert_eq!(pick("ses_abc"), Ok("ses_abc"));
        assert_eq!(pick("api"), Ok("ses_abc"));
        assert_eq!(pick("ses_x"), Ok("ses_x"));
        assert!(pick("web").unwrap_err().contains("2 sessions are named"));
        assert!(pick("ses_ab").unwrap_err().contains("give more of it"));
        assert!(pick("nope").unwrap_err().contains("no session"));
    }

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
