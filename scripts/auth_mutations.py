#!/usr/bin/env python3
"""The mutation check of docs/security.md: delete (or neuter) each authorisation check in turn, run the test that
guards it, and require that test to fail; the file is restored after each. Prints one line per check and exits 1
if any mutation survived or did not apply.

Run from the repository root (cargo under the shared lock, as scripts/test.sh does):
    python3 scripts/auth_mutations.py            # every check
    python3 scripts/auth_mutations.py 3 7        # only checks 3 and 7
"""
import os
import subprocess
import sys

S = "crates/server/src/"
LIB = ["--lib"]
AUTH = ["--test", "auth"]
OIDC = ["--test", "oidc"]

# (number, what, file, the text of the check, what replaces it, the test run)
CHECKS = [
    (1, "middleware::authenticate: a route that needs an account and got none is 401",
     S + "auth/middleware.rs", "        if need == Access::Required {\n            return unauthorized",
     "        if false {\n            return unauthorized", AUTH + ["without_a_session"]),
    (2, "middleware::access: only the listed public routes skip authentication",
     S + "auth/middleware.rs", "    if api {\n        Access::Required", "    if false {\n        Access::Required",
     AUTH + ["without_a_session"]),
    (3, "middleware::identify: x-kvad-account names the account in mode none only",
     S + "auth/middleware.rs", "    if auth.mode() == AuthMode::None {\n        let account",
     "    if auth.mode() == AuthMode::None || headers.contains_key(\"x-kvad-account\") {\n        let account",
     AUTH + ["without_a_session"]),
    (4, "middleware::identify: Basic credentials count in mode basic only",
     S + "auth/middleware.rs", "if scheme.eq_ignore_ascii_case(\"basic\") && auth.mode() == AuthMode::Basic {",
     "if scheme.eq_ignore_ascii_case(\"basic\") {", AUTH + ["without_a_session"]),
    (5, "middleware::csrf_gate: a session-cookie request needs the session's x-csrf-token",
     S + "auth/middleware.rs", "        if !secret::constant_time_eq(sent, csrf_token.as_bytes()) {",
     "        if sent.is_empty() && false && !secret::constant_time_eq(sent, csrf_token.as_bytes()) {",
     AUTH + ["a_cookie_authenticated_change"]),
    (6, "middleware::csrf_gate: a state-changing browser request from another site is refused",
     S + "auth/middleware.rs", "    if cross_site(headers) && !listed {\n        return Err(AuthError::Csrf(\"a state",
     "    if false && cross_site(headers) {\n        return Err(AuthError::Csrf(\"a state",
     AUTH + ["a_cookie_authenticated_change"]),
    (7, "origin::guard: mode none answers requests, reads included, for loopback Host names only",
     S + "auth/origin.rs", "host.filter(|h| !loopback_host(h) &&", "host.filter(|h| false && !loopback_host(h) &&",
     AUTH + ["mode_none"]),
    (8, "middleware::authenticate: the CSRF gate runs for every state-changing method",
     S + "auth/middleware.rs", "    if state_changing(req.method()) {", "    if false && state_changing(req.method()) {",
     AUTH + ["a_cookie_authenticated_change"]),
    (9, "middleware::Admin (extractor): administrators only",
     S + "auth/middleware.rs", "        if !caller.is_admin() {\n            return Err(AuthError::Forbidden",
     "        if false {\n            return Err(AuthError::Forbidden", AUTH + ["a_user_sees_and_changes"]),
    (10, "middleware::Caller (extractor): no caller is 401, never a default",
     S + "auth/middleware.rs",
     "        parts.extensions.get::<Caller>().cloned().ok_or_else(|| AuthError::Unauthenticated.into())",
     "        Ok(parts.extensions.get::<Caller>().cloned().unwrap_or(Caller { account: \"local\".into(), role: Role::Admin, via: Via::Nothing }))",
     LIB + ["the_extractors"]),
    (11, "middleware::Caller::scope: a user's lists are its own",
     S + "auth/middleware.rs", "        (!self.is_admin()).then_some(self.account.as_str())", "        None",
     AUTH + ["a_user_sees_and_changes"]),
    (12, "store::AuthStore::key: a revoked key authenticates nothing",
     S + "auth/store.rs", "WHERE k.hash = ?1 AND k.revoked IS NULL", "WHERE k.hash = ?1", AUTH + ["api_keys"]),
    (13, "store::AuthStore::session: an expired session is not found",
     S + "auth/store.rs", "WHERE s.token_hash = ?1 AND s.expires > {NOW}", "WHERE s.token_hash = ?1",
     LIB + ["expired_sessions"]),
    (14, "store::AuthStore::revoke_key: only the owner's key (a user's DELETE of another's is 404)",
     S + "auth/store.rs", "{NOW})\n                     WHERE id = ?1 AND (?2 IS NULL OR account = ?2)\"",
     "{NOW})\n                     WHERE id = ?1 AND (?2 IS NULL OR 1)\"",
     AUTH + ["a_user_sees_and_changes"]),
    (15, "store::AuthStore::delete_session: only the owner's session",
     S + "auth/store.rs", "\"DELETE FROM sessions WHERE id = ?1 AND (?2 IS NULL OR account = ?2)\"",
     "\"DELETE FROM sessions WHERE id = ?1 AND (?2 IS NULL OR 1)\"", AUTH + ["a_user_sees_and_changes"]),
    (16, "routes::update_user: a user changes only its own password, never a role",
     S + "auth/routes.rs", "    if !caller.is_admin() && (name != caller.account || role.is_some()) {",
     "    if false {", AUTH + ["a_user_sees_and_changes"]),
    (17, "routes::delete_user: never the last administrator",
     S + "auth/routes.rs", "    if account.role == Role::Admin && store.admin_count()? <= 1 {",
     "    if false {", AUTH + ["a_user_sees_and_changes"]),
    (18, "routes::update_user: never demote the last administrator",
     S + "auth/routes.rs",
     "    if role == Some(Role::User) && account.role == Role::Admin && store.admin_count()? <= 1 {",
     "    if false {", AUTH + ["a_user_sees_and_changes"]),
    (19, "Auth::check_password: the password is verified (argon2id)",
     S + "auth/mod.rs", "        if secret::verify_password(password, hash.as_deref()) {",
     "        if account.is_some() {", AUTH + ["login_sets"]),
    (20, "Auth::check_basic: a remembered Basic password is dropped when the password changes",
     S + "auth/mod.rs", "                    if a.password_hash.as_deref() == Some(hash.as_str()) {",
     "                    if !hash.is_empty() {", AUTH + ["basic_mode"]),
    (21, "api::admin::queue: a user sees other accounts' jobs without their names",
     S + "api/admin.rs", "    if let Some(own) = caller.scope() {", "    if let Some(own) = caller.scope().filter(|_| false) {",
     AUTH + ["a_user_sees_the_queue"]),
    (22, "api::admin::usage: a user's usage is its own",
     S + "api/admin.rs", "    let only = caller.scope().map(str::to_string);", "    let only: Option<String> = None;",
     AUTH + ["the_account_generations"]),
    (23, "api::admin::load: the Admin extractor on the route (unload has the same)",
     S + "api/admin.rs", "pub async fn load(State(state): State<AppState>, Admin(who): Admin, body: Bytes)",
     "pub async fn load(State(state): State<AppState>, who: Caller, body: Bytes)", AUTH + ["a_user_sees_and_changes"]),
    (24, "api::pull::handler: pulls need an administrator",
     S + "api/pull.rs", "pub async fn handler(State(state): State<AppState>, _: Admin, body: Bytes)",
     "pub async fn handler(State(state): State<AppState>, _: crate::auth::Caller, body: Bytes)",
     AUTH + ["a_user_sees_and_changes"]),
    (25, "api::chat::handler: the account is the caller's, not a header",
     S + "api/chat.rs", "    let account = caller.account;",
     "    let _ = caller;\n    let account = \"admin\".to_string();", AUTH + ["the_account_generations"]),
    (26, "auth::check_bind: mode none stays on loopback unless --insecure",
     S + "auth/mod.rs", "    if mode == AuthMode::None && !addr.ip().is_loopback() && !insecure {",
     "    if false {", AUTH + ["a_non_loopback_bind"]),
    (27, "oidc::callback: the state cookie ties the callback to the browser that began the login",
     S + "auth/oidc.rs", "    if state_from_cookie(&headers).as_deref() != Some(st.as_str()) {", "    if false {",
     OIDC),
    (28, "store::AuthStore::finish_oidc: a login's state is used once",
     S + "auth/store.rs", "        c.execute(\"DELETE FROM oidc_logins WHERE state = ?1\", [state]).map_err(db_err)?;", "",
     LIB + ["expired_sessions"]),
    (29, "jwt::verify_signature: the ID token's signature must verify against the JWKS",
     S + "auth/jwt.rs", "        if verify_with(jws, alg, k)? {", "        if verify_with(jws, alg, k).is_ok() {",
     LIB + ["signatures_verify"]),
    (30, "jwt::check_claims: the nonce must be this login's",
     S + "auth/jwt.rs", "    if !super::secret::constant_time_eq(nonce.as_bytes(), e.nonce.as_bytes()) {", "    if false {",
     LIB + ["claims_are_checked"]),
    (31, "jwt::check_claims: the audience must include this client",
     S + "auth/jwt.rs", "    if !aud.contains(&e.client_id) {", "    if false {", LIB + ["claims_are_checked"]),
    (32, "routes::login: no password sign-in outside modes local and basic",
     S + "auth/routes.rs", "    if !matches!(mode, AuthMode::Local | AuthMode::Basic) {", "    if false {", OIDC),
    (33, "routes::logout: signing out deletes the session",
     S + "auth/routes.rs", "        state.auth.store().delete_session(id, None)?;", "        let _ = id;",
     AUTH + ["login_sets"]),
    (34, "api/web.rs change: live settings need an administrator",
     S + "api/web.rs", "Admin(_who): Admin, body", "_who: Caller, body", AUTH + ["a_user_sees_and_changes"]),
    (35, "api/bench.rs run: a benchmark needs an administrator",
     S + "api/bench.rs", "Admin(who): Admin, body", "who: Caller, body", AUTH + ["a_user_sees_and_changes"]),
    (36, "api/web.rs recent: a user's recent requests are its own",
     S + "api/web.rs", "let scope = who.scope().map(str::to_string);", "let scope: Option<String> = None;",
     AUTH + ["the_account_generations"]),
    (37, "api/conversations.rs one: a conversation is read only by its account",
     S + "api/conversations.rs", "WHERE c.id = ?1 AND c.account = ?2\"), params![id, account]",
     "WHERE c.id = ?1\"), params![id]", ["--test", "web_routes", "conversations_are_kept_per_account"]),
    (44, "origin::guard: in mode none another web origin is refused, reads included, unless allowed_origins lists it",
     S + "auth/origin.rs", "        if guarded {\n            return refuse(format!(\n                \"a request from",
     "        if false {\n            return refuse(format!(\n                \"a request from",
     AUTH + ["mode_none_refuses_rebound"]),
    (45, "origin::guard: only a listed origin gets a CORS answer",
     S + "auth/origin.rs", "    if !allowed(&server.allowed_origins, &origin) {",
     "    if false && !allowed(&server.allowed_origins, &origin) {", AUTH + ["listed_origins_get_cors"]),
]


def cargo(args):
    env = dict(os.environ, CARGO_TARGET_DIR=os.environ.get("CARGO_TARGET_DIR", "/work/target-helpers"))
    cmd = ["flock", "/tmp/kvad-cargo.lock", "cargo", "test", "-q", "-p", "kvad-server"] + args
    return subprocess.run(cmd, env=env, capture_output=True, text=True)


def main():
    only = {int(a) for a in sys.argv[1:]}
    bad = 0
    for n, what, path, old, new, test in CHECKS:
        if only and n not in only:
            continue
        src = open(path).read()
        if src.count(old) != 1:
            print(f"{n:2} NOT APPLIED ({src.count(old)} matches): {what}")
            bad += 1
            continue
        try:
            open(path, "w").write(src.replace(old, new))
            r = cargo(test)
        finally:
            open(path, "w").write(src)
        compiled = "error[" not in r.stderr and "could not compile" not in r.stderr
        if r.returncode != 0 and compiled:
            print(f"{n:2} caught: {what} ({' '.join(test)} fails)")
        elif not compiled:
            print(f"{n:2} DID NOT COMPILE: {what}\n{r.stderr[-1500:]}")
            bad += 1
        else:
            print(f"{n:2} SURVIVED: {what} ({' '.join(test)} passes without it)")
            bad += 1
        sys.stdout.flush()
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
