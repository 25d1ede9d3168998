// tsc copies no Lua: put the lock scripts next to the compiled loader that reads them (and only these: the loader
// registers every script in the folder, so a script deleted from src must not linger in dist).
import { cpSync, rmSync } from 'node:fs';

rmSync('dist/src/lock/lua', { recursive: true, force: true });
cpSync('src/lock/lua', 'dist/src/lock/lua', { recursive: true });

// The dashboard's static page, served from next to its compiled routes.
rmSync('dist/src/http/dashboard/public', { recursive: true, force: true });
cpSync('src/http/dashboard/public', 'dist/src/http/dashboard/public', { recursive: true });
