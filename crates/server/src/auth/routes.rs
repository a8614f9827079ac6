//! The accounts API: sign in and out, who am I, API keys, accounts, sessions, and the OIDC login. Every `.route`
//! here (one method each) is in `api/table.rs` ROUTES (a test reads this file too).
//!
//! Rules every handler keeps: an ordinary user sees and changes only its own keys and sessions; someone else's is
//! answered 404, exactly as if it did not exist; administrator-only routes take the [`Admin`] extractor (403).

use super::middleware::{cross_site, Via};
use super::session::{cookie, start_session};
use super::{check_name, check_password, secret, Admin, AuthError, Caller, Role};
use crate::config::AuthMode;
use crate::error::ApiError;
use crate::fields::{parse_body, Fields};
use crate::AppState;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Extension, Json, Router};
use serde_json::{json, Map, Value};

/// The accounts routes, merged into the API router.
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/api/auth/login", post(login))
        .route("/api/auth/logout", post(logout))
        .route("/api/auth/me", get(me))
        .route("/api/auth/oidc/login", get(super::oidc::login))
        .route("/api/auth/oidc/callback", get(super::oidc::callback))
        .route("/api/keys", get(keys))
        .route("/api/keys", post(create_key))
        .route("/api/keys/{id}", delete(revoke_key))
        .route("/api/users", get(users))
        .route("/api/users", post(create_user))
        .route("/api/users/{name}", patch(update_user))
        .route("/api/users/{name}", delete(delete_user))
        .route("/api/sessions", get(sessions))
        .route("/api/sessions/{id}", delete(end_session))
}

/// Runs blocking work (argon2, which takes tens of milliseconds by design) off the async workers.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, AuthError> + Send + 'static,
) -> Result<T, AuthError> {
    tokio::task::spawn_blocking(f).await.map_err(|e| AuthError::Internal(e.to_string()))?
}

/// A password field read by hand, so that no error ever echoes its value.
fn password_field(obj: &Map<String, Value>, required: bool) -> Result<Option<String>, AuthError> {
    match obj.get("password") {
        Some(Value::String(s)) => Ok(Some(s.clone())),
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(AuthError::bad("password", "", "password is required")),
        Some(_) => Err(AuthError::bad("password", "(not shown)", "password must be a string")),
    }
}

/// `POST /api/auth/login {"username", "password"}` → `{"account", "role", "csrf_token"}` and the session cookie.
/// A wrong password and an unknown name answer the same 401, in the same time.
pub async fn login(
    State(state): State<AppState>,
    peer: Option<Extension<axum::extract::ConnectInfo<std::net::SocketAddr>>>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let mode = state.auth.mode();
    if !matches!(mode, AuthMode::Local | AuthMode::Basic) {
        return Err(AuthError::NotInMode { what: "signing in with a password", mode: mode.as_str() }.into());
    }
    if cross_site(&headers) {
        return Err(AuthError::Csrf("a sign-in from another site is refused".into()).into());
    }
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let username = f.string("username")?.to_string();
    f.get("password");
    f.finish()?;
    let password = password_field(&obj, true)?.unwrap_or_default();
    let auth = state.auth.clone();
    let address = peer.map(|Extension(c)| c.0.ip());
    let found = blocking(move || auth.sign_in(&username, &password, address)).await?;
    let Some((account, role)) = found else { return Err(AuthError::WrongCredentials.into()) };
    let (set_cookie, csrf) = start_session(&state, &account, &headers)?;
    let mut r = Json(json!({"account": account, "role": role, "csrf_token": csrf})).into_response();
    r.headers_mut().insert(header::SET_COOKIE, set_cookie);
    Ok(r)
}

/// `POST /api/auth/logout`: ends the session the cookie names (if any) and clears the cookie; 204 either way.
pub async fn logout(
    State(state): State<AppState>,
    caller: Option<Extension<Caller>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(id) = caller.as_ref().and_then(|c| c.session_id()) {
        state.auth.store().delete_session(id, None)?;
    }
    let mut r = StatusCode::NO_CONTENT.into_response();
    r.headers_mut().insert(header::SET_COOKIE, cookie("", 0, &headers)?);
    Ok(r)
}

/// `GET /api/auth/me` → `{"account", "role", "mode", "csrf_token"}` (`csrf_token` is "" unless a session cookie
/// authenticated the request).
pub async fn me(State(state): State<AppState>, caller: Caller) -> Json<Value> {
    let csrf = match &caller.via {
        Via::Session { csrf_token, .. } => csrf_token.as_str(),
        _ => "",
    };
    Json(
        json!({"account": caller.account, "role": caller.role, "mode": state.auth.mode().as_str(), "csrf_token": csrf}),
    )
}

/// `GET /api/keys`: the caller's keys (an administrator's: everyone's). The keys themselves are never shown again.
pub async fn keys(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    let rows = state.auth.store().keys(caller.scope())?;
    Ok(Json(json!(rows)))
}

/// `POST /api/keys {"name"}` → `{"id", "name", "key"}`: the only time the key is shown; only its hash is kept.
pub async fn create_key(State(state): State<AppState>, caller: Caller, body: Bytes) -> Result<Json<Value>, ApiError> {
    // A key belongs to an account, and mode none has none (every request is the header's account, unchecked).
    if state.auth.mode() == AuthMode::None {
        return Err(AuthError::NotInMode { what: "an API key (keys belong to accounts)", mode: "none" }.into());
    }
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let name = f.string("name")?.trim().to_string();
    f.finish()?;
    if name.is_empty() || name.chars().count() > 100 || name.chars().any(char::is_control) {
        return Err(AuthError::bad("name", &name, "a key's name is 1 to 100 printable characters").into());
    }
    let key = secret::new_api_key()?;
    let id = secret::token(8)?;
    let prefix = secret::key_shown_prefix(&key);
    state.auth.store().create_key(&id, &caller.account, &name, &secret::sha256_hex(&key), &prefix)?;
    Ok(Json(json!({"id": id, "name": name, "key": key})))
}

/// `DELETE /api/keys/{id}`: revokes one of the caller's keys (an administrator: anyone's); another account's key
/// is a 404, as if it did not exist.
pub async fn revoke_key(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !state.auth.store().revoke_key(&id, caller.scope())? {
        return Err(AuthError::NotFound("API key").into());
    }
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/users` (administrators): `[{"name", "role", "created"}]`.
pub async fn users(State(state): State<AppState>, _: Admin) -> Result<Json<Value>, ApiError> {
    Ok(Json(json!(state.auth.store().accounts()?)))
}

/// `POST /api/users {"name", "password", "role"}` (administrators) → the new account.
pub async fn create_user(State(state): State<AppState>, _: Admin, body: Bytes) -> Result<Json<Value>, ApiError> {
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let name = f.string("name")?.to_string();
    let role = f.opt_string("role")?.map(|r| Role::parse("role", r)).transpose()?.unwrap_or(Role::User);
    f.get("password");
    f.finish()?;
    check_name("name", &name)?;
    let password = password_field(&obj, true)?.unwrap_or_default();
    check_password(&password)?;
    let hash = blocking(move || secret::hash_password(&password)).await?;
    let store = state.auth.store();
    store.create_account(&name, role, Some(&hash), None)?;
    let account = store.account(&name)?.ok_or(AuthError::NotFound("account"))?;
    Ok(Json(json!(account)))
}

/// `PATCH /api/users/{name} {"password"?, "role"?}`: an administrator changes anyone's; a user may change only its
/// own password (403 otherwise, before anything is looked up). A new password ends the account's other sessions.
pub async fn update_user(
    State(state): State<AppState>,
    caller: Caller,
    Path(name): Path<String>,
    body: Bytes,
) -> Result<Json<Value>, ApiError> {
    let obj = parse_body(&body)?;
    let mut f = Fields::new(&obj, "");
    let role = f.opt_string("role")?.map(|r| Role::parse("role", r)).transpose()?;
    f.get("password");
    f.finish()?;
    let password = password_field(&obj, false)?;
    if !caller.is_admin() && (name != caller.account || role.is_some()) {
        return Err(AuthError::Forbidden("a user may change only its own password".into()).into());
    }
    if role.is_none() && password.is_none() {
        return Err(AuthError::bad("password", "", "give password, role or both").into());
    }
    let store = state.auth.store().clone();
    let account = store.account(&name)?.ok_or(AuthError::NotFound("account"))?;
    if let Some(pw) = &password {
        check_password(pw)?;
    }
    if role == Some(Role::User) && account.role == Role::Admin && store.admin_count()? <= 1 {
        return Err(AuthError::LastAdmin(name).into());
    }
    if let Some(pw) = password {
        let hash = blocking(move || secret::hash_password(&pw)).await?;
        store.set_password(&name, &hash)?;
        let keep = if caller.account == name { caller.session_id() } else { None };
        store.delete_sessions_of(&name, keep)?;
    }
    if let Some(r) = role {
        store.set_role(&name, r)?;
    }
    let account = store.account(&name)?.ok_or(AuthError::NotFound("account"))?;
    Ok(Json(json!(account)))
}

/// `DELETE /api/users/{name}` (administrators): the account, its sessions and its keys; never the last
/// administrator.
pub async fn delete_user(
    State(state): State<AppState>,
    _: Admin,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    let store = state.auth.store();
    let account = store.account(&name)?.ok_or(AuthError::NotFound("account"))?;
    if account.role == Role::Admin && store.admin_count()? <= 1 {
        return Err(AuthError::LastAdmin(name).into());
    }
    store.delete_account(&name)?;
    Ok(StatusCode::NO_CONTENT)
}

/// `GET /api/sessions`: the caller's signed-in sessions (an administrator's: everyone's), the current one marked.
pub async fn sessions(State(state): State<AppState>, caller: Caller) -> Result<Json<Value>, ApiError> {
    let rows = state.auth.store().sessions(caller.scope())?;
    let current = caller.session_id();
    let out: Vec<Value> = rows
        .into_iter()
        .map(|s| {
            let mut v = json!(s);
            v["current"] = json!(Some(s.id.as_str()) == current);
            v
        })
        .collect();
    Ok(Json(json!(out)))
}

/// `DELETE /api/sessions/{id}`: signs a session out (the caller's own; an administrator's: anyone's); another
/// account's is a 404.
pub async fn end_session(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    if !state.auth.store().delete_session(&id, caller.scope())? {
        return Err(AuthError::NotFound("session").into());
    }
    Ok(StatusCode::NO_CONTENT)
}
