// The operator token: kept in sessionStorage (gone when the tab closes), sent
// only as a bearer header. `needed` turns on when the API answers 401, which
// shows the prompt; the shell itself never needs a token to load.
const KEY = "shepherd.token";

type Listener = () => void;
const listeners = new Set<Listener>();
let needed = false;
let version = 0;
/** Used only where sessionStorage is unavailable. */
let memory: string | null = null;

function read(): string | null {
  try {
    return sessionStorage.getItem(KEY) ?? memory;
  } catch {
    return memory;
  }
}

function emit() {
  version++;
  for (const l of listeners) l();
}

export const authStore = {
  token: read,
  needed: () => needed,
  version: () => version,
  subscribe(l: Listener) {
    listeners.add(l);
    return () => listeners.delete(l);
  },
  markNeeded() {
    if (!needed) {
      needed = true;
      emit();
    }
  },
  set(token: string) {
    try {
      sessionStorage.setItem(KEY, token);
    } catch {
      memory = token; // storage disabled: the token lives for this page only
    }
    needed = false;
    emit();
  },
  clear() {
    memory = null;
    try {
      sessionStorage.removeItem(KEY);
    } catch {
      /* nothing stored */
    }
    emit();
  },
};
