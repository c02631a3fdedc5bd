#!/usr/bin/env node
// svc, the command-line client. Tables for people, --json for scripts; API errors are printed as
// the API's {error} message with a non-zero exit. One file per command group under commands/;
// the tree is built in program.ts, only the part the command line names.
import { buildProgram } from './program.js';

// Not awaited at the top level: bin/svc runs the CLI bundled as CommonJS (Makefile), which has no
// top-level await; a rejection still ends the process with its error, as one awaited would.
void buildProgram(process.argv.slice(2)).parseAsync();
