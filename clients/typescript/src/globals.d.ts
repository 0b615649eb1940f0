// Connect's CallOptions.headers is typed `HeadersInit`, a DOM lib type this Node-only build does not
// load (lib ES2022): without this it resolves to an error type, unchecked. Node's own fetch types
// (undici, via @types/node) define the same type.
type HeadersInit = import("undici-types").HeadersInit;
