// A small history router: the server answers every UI path with index.html, so each page has a real URL.

export const route = $state({ path: location.pathname });

export function go(path: string, replace = false) {
  if (path === route.path) return;
  if (replace) history.replaceState(null, '', path);
  else history.pushState(null, '', path);
  route.path = path;
  window.scrollTo(0, 0);
}

addEventListener('popstate', () => {
  route.path = location.pathname;
});

/** Follows a same-origin link without reloading (use as onclick on <a href>). */
export function link(e: MouseEvent) {
  const a = e.currentTarget as HTMLAnchorElement;
  if (e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey || a.target) return;
  e.preventDefault();
  go(a.pathname + a.search);
}
