//! `shepherd users add|list|set-role|disable|enable` and `shepherd tokens
//! create|list|revoke`: people and their personal access tokens, through
//! the server's API. `tokens create` prints the secret alone on stdout, so
//! a script can capture it (`TOKEN=$(shepherd tokens create --name ci)`).

use clap::{Subcommand, ValueEnum};
use shepherd_protocol::{CreateToken, CreateUser, Role, UpdateUser, User};

use crate::render::table;

use super::output::{client, explain, print_data};
use super::{Global, Output, Result};

/// A role, as the command line spells it.
#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum RoleArg {
    /// Reads everything; changes nothing; no terminal input.
    Viewer,
    /// Tasks, runs, sessions and terminals, conversations, answers, webhooks.
    Operator,
    /// Everything, users and everyone's tokens included.
    Admin,
}

impl From<RoleArg> for Role {
    fn from(r: RoleArg) -> Role {
        match r {
            RoleArg::Viewer => Role::Viewer,
            RoleArg::Operator => Role::Operator,
            RoleArg::Admin => Role::Admin,
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum UserCommand {
    /// Add a user (admins only).
    Add {
        /// 1-64 lowercase letters, digits and - _ .
        name: String,
        /// What the user may do.
        #[arg(long, value_enum)]
        role: RoleArg,
        /// Their email address, for the record.
        #[arg(long)]
        email: Option<String>,
    },
    /// List users with their roles.
    List,
    /// Change a user's role.
    SetRole {
        /// The user's name.
        name: String,
        /// The new role.
        #[arg(value_enum)]
        role: RoleArg,
    },
    /// Disable a user: their tokens answer 401 until enabled again.
    Disable {
        /// The user's name.
        name: String,
    },
    /// Enable a disabled user again.
    Enable {
        /// The user's name.
        name: String,
    },
}

#[derive(Debug, Subcommand)]
pub enum TokenCommand {
    /// Make a personal access token; prints only the token (shown once).
    Create {
        /// What it is for (laptop, ci), shown in lists.
        #[arg(long)]
        name: String,
        /// Whose token (admins only; default: yours).
        #[arg(long)]
        user: Option<String>,
        /// Lifetime with a unit: 90m, 12h, 30d, 2w (default: no expiry).
        #[arg(long, value_name = "AGE")]
        expires: Option<String>,
    },
    /// List your tokens (an admin sees everyone's), never their secrets.
    List,
    /// Revoke a token: it answers 401 from now on.
    Revoke {
        /// The token's id (`shepherd tokens list`).
        id: String,
    },
}

fn print_user(g: &Global, u: &User, what: &str) {
    match g.output {
        Output::Json | Output::Yaml => print_data(g.output, u),
        Output::Table => println!(
            "{what} {} ({}{})",
            u.name,
            u.role,
            if u.disabled { ", disabled" } else { "" }
        ),
    }
}

pub async fn users(g: &Global, cmd: &UserCommand) -> Result<()> {
    let c = client(g)?;
    let change = |role: Option<Role>, disabled: Option<bool>| UpdateUser { role, disabled };
    match cmd {
        UserCommand::Add { name, role, email } => {
            let u = c
                .create_user(&CreateUser {
                    name: name.clone(),
                    role: (*role).into(),
                    email: email.clone(),
                })
                .await
                .map_err(explain)?;
            print_user(g, &u, "added");
        }
        UserCommand::List => {
            let list = c.users().await.map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &list),
                Output::Table => {
                    let rows: Vec<Vec<String>> = list
                        .users
                        .iter()
                        .map(|u| {
                            vec![
                                u.name.clone(),
                                u.role.to_string(),
                                if u.disabled { "disabled" } else { "enabled" }.into(),
                                u.email.clone().unwrap_or_default(),
                                u.created_at.clone(),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table(&["NAME", "ROLE", "STATE", "EMAIL", "CREATED"], &rows)
                    );
                }
            }
        }
        UserCommand::SetRole { name, role } => {
            let u = c
                .update_user(name, &change(Some((*role).into()), None))
                .await
                .map_err(explain)?;
            print_user(g, &u, "changed");
        }
        UserCommand::Disable { name } => {
            let u = c
                .update_user(name, &change(None, Some(true)))
                .await
                .map_err(explain)?;
            print_user(g, &u, "disabled");
        }
        UserCommand::Enable { name } => {
            let u = c
                .update_user(name, &change(None, Some(false)))
                .await
                .map_err(explain)?;
            print_user(g, &u, "enabled");
        }
    }
    Ok(())
}

pub async fn tokens(g: &Global, cmd: &TokenCommand) -> Result<()> {
    let c = client(g)?;
    match cmd {
        TokenCommand::Create {
            name,
            user,
            expires,
        } => {
            let made = c
                .create_token(&CreateToken {
                    name: name.clone(),
                    user: user.clone(),
                    expires_in: expires.clone(),
                })
                .await
                .map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &made),
                Output::Table => {
                    // The secret alone on stdout; what a person wants to
                    // know about it on stderr, so `$(…)` captures the token.
                    println!("{}", made.token);
                    eprintln!(
                        "token {} for {} ({}); shown this once",
                        made.id,
                        made.user,
                        made.expires_at
                            .as_deref()
                            .map_or("no expiry".to_owned(), |at| format!("expires {at}"))
                    );
                }
            }
        }
        TokenCommand::List => {
            let list = c.tokens().await.map_err(explain)?;
            match g.output {
                Output::Json | Output::Yaml => print_data(g.output, &list),
                Output::Table if list.tokens.is_empty() => println!("no tokens"),
                Output::Table => {
                    let rows: Vec<Vec<String>> = list
                        .tokens
                        .iter()
                        .map(|t| {
                            vec![
                                t.id.clone(),
                                t.name.clone(),
                                t.user.clone(),
                                t.created_at.clone(),
                                t.expires_at.clone().unwrap_or_else(|| "never".into()),
                                t.last_used_at.clone().unwrap_or_else(|| "never".into()),
                            ]
                        })
                        .collect();
                    print!(
                        "{}",
                        table(
                            &["ID", "NAME", "USER", "CREATED", "EXPIRES", "LAST USED"],
                            &rows
                        )
                    );
                }
            }
        }
        TokenCommand::Revoke { id } => {
            c.revoke_token(id).await.map_err(explain)?;
            if g.output == Output::Table {
                println!("revoked {id}");
            }
        }
    }
    Ok(())
}
