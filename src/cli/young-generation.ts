import v8 from 'node:v8'

/*
 * Keeps V8's young generation at its initial size (imported first by the CLI, before any module
 * allocates). The proxy's objects either live as long as a session or die with the message that
 * made them; the default young generation grows to 8–16 MB semi-spaces of resident memory under
 * load and keeps them, tens of kB per client at a few hundred clients. Held small, scavenges
 * come more often but each is short.
 */
v8.setFlagsFromString('--semi-space-growth-factor=1')
