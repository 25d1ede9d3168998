// tsc copies no Lua: put the lock scripts next to the compiled loader that reads them (and only these: the loader
// registers every script in the folder, so a script deleted from src must not linger in dist).
import { cpSync, rmSync } from 'node:fs';

rmSync('dist/src/lock/lua', { recursive: true, force: true });
cpSync('src/lock/lua', 'dist/src/lock/lua', { recursive: true });

// The static pages (dashboard, API docs), served from next to their compiled routes.
for (const page of ['dashboard', 'docs']) {
  rmSync(`dist/src/http/${page}/public`, { recursive: true, force: true });
  cpSync(`src/http/${page}/public`, `dist/src/http/${page}/public`, { recursive: true });
}
