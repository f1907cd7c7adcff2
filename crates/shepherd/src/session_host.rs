//! This node as a host of sessions: its id, the address it advertises, the
//! session manager built from the configuration, and what the node says
//! about itself in the host list.

use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::sync::Arc;

use shepherd_sessions::{AgentSpec, ManagerConfig, SessionManager};
use shepherd_store::Store;

use crate::config::Config;

/// The node id: configured, or generated once and kept in the data directory
/// so that a restarted server still hosts its sessions.
pub fn node_id(config: &Config) -> std::io::Result<String> {
    if let Some(id) = &config.node_id {
        return Ok(id.clone());
    }
    let path = config.data_dir.join("node-id");
    // Never through a link: the data directory's files are read as they are.
    let read = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .and_then(|mut f| {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut f, &mut s).map(|_| s)
        });
    if let Ok(id) = read {
        let id = id.trim();
        if !id.is_empty() {
            return Ok(id.to_owned());
        }
    }
    std::fs::create_dir_all(&config.data_dir)?;
    let id = format!("node-{}", &uuid_like()[..12]);
    write_new(&path, &id)?;
    Ok(id)
}

fn uuid_like() -> String {
    let mut buf = [0u8; 8];
    // SAFETY: getrandom(2) fills the buffer it is given.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != buf.len() as isize {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        buf = (t as u64 ^ std::process::id() as u64).to_le_bytes();
    }
    buf.iter().map(|b| format!("{b:02x}")).collect()
}

fn write_new(path: &Path, id: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, id)?;
    std::fs::rename(tmp, path)
}

/// The session manager of this node.
pub fn manager(
    config: &Config,
    store: Store,
    addr: std::net::SocketAddr,
) -> std::io::Result<Arc<SessionManager>> {
    let mut mc = ManagerConfig::new(config.data_dir.clone(), node_id(config)?);
    mc.node_address = Some(config.advertise_url.clone().unwrap_or_else(|| {
        let scheme = if config.tls.is_some() {
            "https"
        } else {
            "http"
        };
        format!("{scheme}://{addr}")
    }));
    mc.sessions_root = config.sessions_root.clone();
    mc.child_umask = crate::private_data::inherited_umask();
    mc.agents = config
        .agents
        .iter()
        .map(|(name, a)| (name.clone(), AgentSpec::from(a)))
        .collect();
    Ok(SessionManager::new(store, mc))
}

/// What this node says about itself as a host: its id and advertised
/// address (the session manager's), its sessions root, the agents its
/// built-in runner runs and their slots.
pub fn declaration(config: &Config, manager: &ManagerConfig) -> shepherd_store::HostDeclaration {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| manager.node_id.clone());
    shepherd_store::HostDeclaration {
        id: manager.node_id.clone(),
        name,
        address: manager.node_address.clone(),
        sessions_root: config.sessions_root.as_ref().map(|r| {
            std::path::absolute(r)
                .unwrap_or_else(|_| r.clone())
                .display()
                .to_string()
        }),
        agents: config.agents.keys().cloned().collect(),
        // No agents: nothing to count slots of.
        slots: (!config.agents.is_empty()).then(|| config.agents.values().map(|a| a.slots()).sum()),
    }
}
