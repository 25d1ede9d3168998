// tsc copies no Lua: put the lock scripts next to the compiled loader that reads them.
import { cpSync } from 'node:fs';

cpSync('src/lock/lua', 'dist/src/lock/lua', { recursive: true });
