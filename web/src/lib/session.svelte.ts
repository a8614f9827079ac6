// Who is signed in. `GET /api/auth/me` answers it; a 404 there means the server has no authentication layer
// (built before it, or auth merged later), which the UI treats as mode `none`: the local account, an administrator.
import { ApiError, getJson, request, sendJson, setCsrf, whenUnauthorised } from './api';

export interface Me {
  account: string;
  role: string;
  mode: string;
  csrf_token?: string | null;
}

export const session = $state({
  /** Still asking the server. */
  checking: true,
  /** Signed in (or no authentication). */
  me: null as Me | null,
  /** The mode the server said while nobody is signed in (to offer OpenID), when it said one. */
  mode: null as string | null,
  error: null as string | null,
});

export function isAdmin(me: Me | null): boolean {
  return !!me && (me.role === 'admin' || me.role === 'administrator');
}

function signedIn(me: Me) {
  session.me = me;
  session.mode = me.mode;
  setCsrf(me.csrf_token ?? null);
}

export async function checkSession() {
  session.checking = true;
  session.error = null;
  try {
    signedIn(await getJson<Me>('/api/auth/me'));
  } catch (e) {
    const err = e as ApiError;
    if (err.status === 404) signedIn({ account: 'local', role: 'admin', mode: 'none', csrf_token: null });
    else if (err.status === 401) {
      session.me = null;
      session.mode = err.code === 'oidc' ? 'oidc' : session.mode;
    } else session.error = err.message;
  } finally {
    session.checking = false;
  }
}

export async function signIn(username: string, password: string) {
  const r = await sendJson<{ account: string; role: string; csrf_token: string }>('/api/auth/login', { username, password });
  signedIn({ account: r.account, role: r.role, mode: session.mode ?? 'local', csrf_token: r.csrf_token });
  // The mode comes from /api/auth/me; ask again now that the cookie is set.
  await checkSession();
}

export async function signOut() {
  try {
    await request('/api/auth/logout', { method: 'POST' });
  } finally {
    session.me = null;
    setCsrf(null);
  }
}

whenUnauthorised(() => {
  if (session.me && session.me.mode !== 'none') session.me = null;
});
