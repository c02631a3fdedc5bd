// The board's data: boards, their columns and the columns' cards, in one SQLite file on the
// board's volume. SQLite through node-sqlite3-wasm, SQLite compiled to WebAssembly with direct
// file access: the board runs on whatever Node the operator's base image has (Debian's Node 18 in
// the tests, Node 24 by default) without compiling a native addon inside the image, which has
// no compiler; node:sqlite needs Node 22.
import { createRequire } from 'node:module';
import type { Database as SqliteDatabase, SQLiteValue } from 'node-sqlite3-wasm';

// A CommonJS package whose exports Node's ESM loader cannot name.
const { Database } = createRequire(import.meta.url)('node-sqlite3-wasm') as typeof import('node-sqlite3-wasm');

export interface Card {
  id: number;
  column_id: number;
  title: string;
  description: string;
  position: number;
  created_at: number;
  updated_at: number;
}

export interface Column {
  id: number;
  board_id: number;
  name: string;
  position: number;
}

export interface BoardSummary {
  id: number;
  name: string;
  created_at: number;
}

export interface Board extends BoardSummary {
  columns: Array<Column & { cards: Card[] }>;
}

export class NotFound extends Error {}

/** Columns a new board starts with. */
export const DEFAULT_COLUMNS = ['To do', 'Doing', 'Done'];

// Numbered schema steps; PRAGMA user_version says how many ran.
const MIGRATIONS = [
  `CREATE TABLE boards (id INTEGER PRIMARY KEY, name TEXT NOT NULL, created_at INTEGER NOT NULL);
   CREATE TABLE columns (id INTEGER PRIMARY KEY, board_id INTEGER NOT NULL REFERENCES boards(id) ON DELETE CASCADE,
     name TEXT NOT NULL, position INTEGER NOT NULL);
   CREATE TABLE cards (id INTEGER PRIMARY KEY, column_id INTEGER NOT NULL REFERENCES columns(id) ON DELETE CASCADE,
     title TEXT NOT NULL, description TEXT NOT NULL DEFAULT '', position INTEGER NOT NULL,
     created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL);
   CREATE INDEX columns_board ON columns(board_id, position);
   CREATE INDEX cards_column ON cards(column_id, position);`,
];

type Row = Record<string, SQLiteValue>;

export class BoardStore {
  private readonly db: SqliteDatabase;

  constructor(file: string, private readonly now: () => number = () => Math.floor(Date.now() / 1000)) {
    this.db = new Database(file);
    this.db.exec('PRAGMA foreign_keys = ON');
    const version = Number((this.db.get('PRAGMA user_version') as Row | null)?.user_version ?? 0);
    MIGRATIONS.slice(version).forEach((sql, i) => {
      this.transaction(() => {
        this.db.exec(sql);
        this.db.exec(`PRAGMA user_version = ${version + i + 1}`);
      });
    });
  }

  close(): void {
    this.db.close();
  }

  listBoards(): BoardSummary[] {
    return (this.db.all('SELECT id, name, created_at FROM boards ORDER BY id') as Row[]).map(boardSummary);
  }

  createBoard(name: string): Board {
    return this.transaction(() => {
      const id = Number(this.db.run('INSERT INTO boards (name, created_at) VALUES (?, ?)', [name, this.now()]).lastInsertRowid);
      DEFAULT_COLUMNS.forEach((column, position) => this.db.run('INSERT INTO columns (board_id, name, position) VALUES (?, ?, ?)', [id, column, position]));
      return this.board(id);
    });
  }

  board(id: number): Board {
    const row = this.db.get('SELECT id, name, created_at FROM boards WHERE id = ?', [id]) as Row | null;
    if (!row) throw new NotFound('board not found');
    const columns = (this.db.all('SELECT * FROM columns WHERE board_id = ? ORDER BY position, id', [id]) as Row[]).map(column);
    const cards = (this.db.all('SELECT cards.* FROM cards JOIN columns ON columns.id = cards.column_id WHERE columns.board_id = ? ORDER BY cards.position, cards.id', [id]) as Row[]).map(card);
    return { ...boardSummary(row), columns: columns.map((c) => ({ ...c, cards: cards.filter((k) => k.column_id === c.id) })) };
  }

  renameBoard(id: number, name: string): Board {
    if (this.db.run('UPDATE boards SET name = ? WHERE id = ?', [name, id]).changes === 0) throw new NotFound('board not found');
    return this.board(id);
  }

  deleteBoard(id: number): void {
    if (this.db.run('DELETE FROM boards WHERE id = ?', [id]).changes === 0) throw new NotFound('board not found');
  }

  addColumn(boardId: number, name: string): Column {
    return this.transaction(() => {
      this.board(boardId);
      const position = Number((this.db.get('SELECT COUNT(*) AS n FROM columns WHERE board_id = ?', [boardId]) as Row).n);
      const id = Number(this.db.run('INSERT INTO columns (board_id, name, position) VALUES (?, ?, ?)', [boardId, name, position]).lastInsertRowid);
      return this.column(id);
    });
  }

  /** Renames and/or moves a column to `position` among its board's columns. */
  updateColumn(id: number, patch: { name?: string; position?: number }): Column {
    return this.transaction(() => {
      const c = this.column(id);
      if (patch.name !== undefined) this.db.run('UPDATE columns SET name = ? WHERE id = ?', [patch.name, id]);
      if (patch.position !== undefined) {
        const ids = this.ids('SELECT id FROM columns WHERE board_id = ? AND id != ? ORDER BY position, id', [c.board_id, id]);
        this.renumber('columns', place(ids, id, patch.position));
      }
      return this.column(id);
    });
  }

  /** Deletes the column with its cards. */
  deleteColumn(id: number): void {
    this.transaction(() => {
      const c = this.column(id);
      this.db.run('DELETE FROM columns WHERE id = ?', [id]);
      this.renumber('columns', this.ids('SELECT id FROM columns WHERE board_id = ? ORDER BY position, id', [c.board_id]));
    });
  }

  addCard(columnId: number, title: string, description: string): Card {
    return this.transaction(() => {
      this.column(columnId);
      const position = Number((this.db.get('SELECT COUNT(*) AS n FROM cards WHERE column_id = ?', [columnId]) as Row).n);
      const now = this.now();
      const id = Number(this.db.run('INSERT INTO cards (column_id, title, description, position, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?)', [columnId, title, description, position, now, now]).lastInsertRowid);
      return this.card(id);
    });
  }

  /**
   * Edits a card and/or moves it: to another column of the same board (at its end unless a
   * position is given) or to `position` within its column.
   */
  updateCard(id: number, patch: { title?: string; description?: string; column_id?: number; position?: number }): Card {
    return this.transaction(() => {
      const before = this.card(id);
      const from = this.column(before.column_id);
      if (patch.title !== undefined) this.db.run('UPDATE cards SET title = ? WHERE id = ?', [patch.title, id]);
      if (patch.description !== undefined) this.db.run('UPDATE cards SET description = ? WHERE id = ?', [patch.description, id]);
      if (patch.column_id !== undefined || patch.position !== undefined) {
        const targetId = patch.column_id ?? before.column_id;
        const target = this.column(targetId);
        if (target.board_id !== from.board_id) throw new NotFound('column not found on this board');
        const others = this.ids('SELECT id FROM cards WHERE column_id = ? AND id != ? ORDER BY position, id', [targetId, id]);
        this.db.run('UPDATE cards SET column_id = ? WHERE id = ?', [targetId, id]);
        this.renumber('cards', place(others, id, patch.position ?? others.length));
        if (targetId !== before.column_id) {
          this.renumber('cards', this.ids('SELECT id FROM cards WHERE column_id = ? ORDER BY position, id', [before.column_id]));
        }
      }
      this.db.run('UPDATE cards SET updated_at = ? WHERE id = ?', [this.now(), id]);
      return this.card(id);
    });
  }

  deleteCard(id: number): void {
    this.transaction(() => {
      const c = this.card(id);
      this.db.run('DELETE FROM cards WHERE id = ?', [id]);
      this.renumber('cards', this.ids('SELECT id FROM cards WHERE column_id = ? ORDER BY position, id', [c.column_id]));
    });
  }

  private column(id: number): Column {
    const row = this.db.get('SELECT * FROM columns WHERE id = ?', [id]) as Row | null;
    if (!row) throw new NotFound('column not found');
    return column(row);
  }

  private card(id: number): Card {
    const row = this.db.get('SELECT * FROM cards WHERE id = ?', [id]) as Row | null;
    if (!row) throw new NotFound('card not found');
    return card(row);
  }

  private ids(sql: string, values: SQLiteValue[]): number[] {
    return (this.db.all(sql, values) as Row[]).map((r) => Number(r.id));
  }

  /** Positions 0..n-1 in the order given. */
  private renumber(table: 'columns' | 'cards', ids: number[]): void {
    ids.forEach((id, position) => this.db.run(`UPDATE ${table} SET position = ? WHERE id = ?`, [position, id]));
  }

  private transaction<T>(work: () => T): T {
    // Nested calls (a migration step, a helper) join the open transaction.
    if (this.db.inTransaction) return work();
    this.db.exec('BEGIN IMMEDIATE');
    try {
      const result = work();
      this.db.exec('COMMIT');
      return result;
    } catch (err) {
      this.db.exec('ROLLBACK');
      throw err;
    }
  }
}

/** `ids` with `id` inserted at `position` (clamped to the list). */
function place(ids: number[], id: number, position: number): number[] {
  const at = Math.max(0, Math.min(position, ids.length));
  return [...ids.slice(0, at), id, ...ids.slice(at)];
}

function boardSummary(r: Row): BoardSummary {
  return { id: Number(r.id), name: String(r.name), created_at: Number(r.created_at) };
}

function column(r: Row): Column {
  return { id: Number(r.id), board_id: Number(r.board_id), name: String(r.name), position: Number(r.position) };
}

function card(r: Row): Card {
  return {
    id: Number(r.id),
    column_id: Number(r.column_id),
    title: String(r.title),
    description: String(r.description),
    position: Number(r.position),
    created_at: Number(r.created_at),
    updated_at: Number(r.updated_at),
  };
}
