// kvscope's page runs its engine on Web Workers that share the module's memory, which a browser
// allows only to a cross-origin isolated page (docs/web.md). scripts/web_serve.py sends the two
// headers that make it so; a static host that cannot (GitHub Pages, `python3 -m http.server`)
// gets them from this service worker instead: the page registers it when it finds itself not
// isolated, reloads once, and from then on every response of its own origin passes through here
// with Cross-Origin-Opener-Policy and Cross-Origin-Embedder-Policy added.
self.addEventListener('install', () => self.skipWaiting());
self.addEventListener('activate', (event) => event.waitUntil(self.clients.claim()));
self.addEventListener('fetch', (event) => {
  const request = event.request;
  // A cache-only request from another origin cannot be fetched again here (the browser refuses).
  if (request.cache === 'only-if-cached' && request.mode !== 'same-origin') return;
  event.respondWith(fetch(request).then((response) => {
    if (response.status === 0) return response;  // opaque: its headers cannot be changed
    const headers = new Headers(response.headers);
    headers.set('Cross-Origin-Opener-Policy', 'same-origin');
    headers.set('Cross-Origin-Embedder-Policy', 'require-corp');
    return new Response(response.body,
                        {status: response.status, statusText: response.statusText, headers});
  }));
});
