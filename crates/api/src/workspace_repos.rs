//! Which git repositories of this host the server may read for a run.
//!
//! A run's workspace (`repo`, `branch`, `base_commit`) is what a worker
//! reported, and a worker token is not the operator: a repository it names
//! is read only when the operator named it too, as the `repo` of a
//! configured worktree agent (`[agents.NAME] repo`, handed over as
//! [`crate::Settings::workspace_repos`]). Anything else on the host, other
//! projects, `~/.ssh` under a git repository, is refused whatever the worker
//! wrote. Paths are compared after resolving symlinks and `..`, so neither
//! leads out of a configured repository.
//!
//! [`allowed_repo`] is the one place that decides; repositories a runner
//! registers for its host will be accepted here too.

use std::path::{Path, PathBuf};

/// Why a recorded repository is not read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepoRefusal {
    /// No configured agent names it.
    NotAllowed,
    /// A configured agent names it, but it is not on this host any more
    /// (moved or deleted).
    Gone,
}

/// The directory to run git in for a recorded repository, `recorded`: its
/// canonical path, when it is one of the `allowed` repositories. A path
/// that does not resolve is `Gone` only when it is literally a configured
/// one, so an answer never tells a worker whether some other path exists.
pub fn allowed_repo(allowed: &[PathBuf], recorded: &Path) -> Result<PathBuf, RepoRefusal> {
    // A relative path would be read against the server's own directory.
    if !recorded.is_absolute() {
        return Err(RepoRefusal::NotAllowed);
    }
    match std::fs::canonicalize(recorded) {
        Ok(real) => {
            if allowed
                .iter()
                .any(|a| std::fs::canonicalize(a).is_ok_and(|a| a == real))
            {
                Ok(real)
            } else {
                Err(RepoRefusal::NotAllowed)
            }
        }
        Err(_) if allowed.iter().any(|a| a == recorded) => Err(RepoRefusal::Gone),
        Err(_) => Err(RepoRefusal::NotAllowed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_configured_repositories_resolve_symlinks_and_dots_included() {
        let dir = std::env::temp_dir().join(format!("shepherd-repos-{}", std::process::id()));
        let (repo, other) = (dir.join("repo"), dir.join("other"));
        std::fs::create_dir_all(repo.join("sub")).unwrap();
        std::fs::create_dir_all(&other).unwrap();
        std::os::unix::fs::symlink(&repo, dir.join("link")).unwrap();
        std::os::unix::fs::symlink(&other, repo.join("escape")).unwrap();
        let allowed = vec![repo.clone()];
        let real = std::fs::canonicalize(&repo).unwrap();
        assert_eq!(allowed_repo(&allowed, &repo), Ok(real.clone()));
        assert_eq!(allowed_repo(&allowed, &dir.join("link")), Ok(real.clone()));
        assert_eq!(
            allowed_repo(&allowed, &repo.join("sub").join("..")),
            Ok(real)
        );
        for refused in [
            other.clone(),
            repo.join("escape"),
            repo.join("sub"),
            repo.join(".."),
            dir.join("missing"),
            PathBuf::from("repo"),
            PathBuf::from("/"),
        ] {
            assert_eq!(
                allowed_repo(&allowed, &refused),
                Err(RepoRefusal::NotAllowed),
                "{refused:?}"
            );
        }
        // Allowed through a symlinked configuration too.
        assert!(allowed_repo(&[dir.join("link")], &repo).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
        assert_eq!(allowed_repo(&allowed, &repo), Err(RepoRefusal::Gone));
        assert_eq!(allowed_repo(&allowed, &other), Err(RepoRefusal::NotAllowed));
    }
}
