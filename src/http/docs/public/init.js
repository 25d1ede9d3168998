// Swagger UI over the service's own document; a file, not an inline script, so the page's policy needs no 'unsafe-inline' for scripts.
window.addEventListener('load', () => {
  window.SwaggerUIBundle({ url: '/openapi.json', dom_id: '#ui' });
});
