// The board's web page: plain JavaScript served as-is (no bundler: the board's image holds only
// what svcd copies into it). Signs in with the admin token (kept in this tab's sessionStorage,
// sent as a bearer token), then shows boards, columns and cards. Text from the API is set with
// textContent only, never as HTML.
const TOKEN_KEY = 'svc-kanban-token';
const $ = (id) => document.getElementById(id);

let token = sessionStorage.getItem(TOKEN_KEY);
let currentBoardId = null;

/** Calls the board's API; a 401 signs out. */
async function api(method, path, body) {
  const headers = { authorization: `Bearer ${token}` };
  if (body !== undefined) headers['content-type'] = 'application/json';
  const res = await fetch(path, { method, headers, body: body === undefined ? undefined : JSON.stringify(body) });
  if (res.status === 401) {
    signOut('That admin token is not valid.');
    throw new Error('unauthorized');
  }
  if (res.status === 204) return null;
  const data = await res.json();
  if (!res.ok) throw new Error(data.error ?? `HTTP ${res.status}`);
  return data;
}

/** Runs an action and shows its failure instead of throwing it away. */
async function act(work) {
  $('status').textContent = '';
  try {
    await work();
  } catch (err) {
    if (err.message !== 'unauthorized') $('status').textContent = err.message;
  }
}

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (key.startsWith('on')) node.addEventListener(key.slice(2), value);
    else if (key === 'text') node.textContent = value;
    else if (value !== undefined && value !== false) node.setAttribute(key, value === true ? '' : value);
  }
  node.append(...children);
  return node;
}

function signOut(message = '') {
  token = null;
  sessionStorage.removeItem(TOKEN_KEY);
  $('boards').hidden = true;
  $('sign-out').hidden = true;
  $('sign-in').hidden = false;
  $('sign-in').querySelector('.error').textContent = message;
}

async function showBoards() {
  $('sign-in').hidden = true;
  $('boards').hidden = false;
  $('sign-out').hidden = false;
  const boards = await api('GET', '/api/boards');
  if (currentBoardId === null || !boards.some((b) => b.id === currentBoardId)) currentBoardId = boards[0]?.id ?? null;
  $('board-list').replaceChildren(
    ...boards.map((b) =>
      el('li', {}, el('button', { type: 'button', 'aria-current': String(b.id === currentBoardId), text: b.name, onclick: () => act(() => openBoard(b.id)) })),
    ),
  );
  if (currentBoardId === null) $('board').replaceChildren(el('p', { text: 'No boards yet: create one.' }));
  else await renderBoard(await api('GET', `/api/boards/${currentBoardId}`));
}

async function openBoard(id) {
  currentBoardId = id;
  await showBoards();
}

const refresh = () => showBoards();

function renderBoard(board) {
  const columns = board.columns;
  const head = el(
    'div',
    { class: 'board-head' },
    el('h2', { text: board.name }),
    el('button', { type: 'button', text: 'Delete board', onclick: () => act(async () => {
      if (!confirm(`Delete the board "${board.name}" with all its cards?`)) return;
      await api('DELETE', `/api/boards/${board.id}`);
      currentBoardId = null;
      await refresh();
    }) }),
  );
  const addColumn = el('form', { class: 'column', 'aria-label': 'New column', onsubmit: (e) => act(async () => {
    e.preventDefault();
    await api('POST', `/api/boards/${board.id}/columns`, { name: e.target.elements.name.value });
    await refresh();
  }) }, el('label', {}, 'New column ', el('input', { name: 'name', maxlength: '100', required: true })), el('button', { type: 'submit', text: 'Add column' }));
  $('board').replaceChildren(head, el('div', { class: 'columns' }, ...columns.map((c, i) => renderColumn(c, columns[i - 1], columns[i + 1])), addColumn));
}

function renderColumn(column, left, right) {
  const section = el('section', { class: 'column', 'aria-label': column.name, 'data-column-id': String(column.id) });
  // Drag and drop: a card dropped on a column goes to its end.
  section.addEventListener('dragover', (e) => {
    e.preventDefault();
    section.classList.add('drop-target');
  });
  section.addEventListener('dragleave', () => section.classList.remove('drop-target'));
  section.addEventListener('drop', (e) => act(async () => {
    e.preventDefault();
    section.classList.remove('drop-target');
    const cardId = Number(e.dataTransfer.getData('text/plain'));
    if (cardId) await api('PATCH', `/api/cards/${cardId}`, { column_id: column.id });
    await refresh();
  }));
  const heading = el('h3', {}, el('span', { text: `${column.name} (${column.cards.length})` }), el('button', {
    type: 'button', 'aria-label': `Delete column ${column.name}`, text: '×', onclick: () => act(async () => {
      if (column.cards.length && !confirm(`Delete the column "${column.name}" and its ${column.cards.length} cards?`)) return;
      await api('DELETE', `/api/columns/${column.id}`);
      await refresh();
    }),
  }));
  const cards = el('ul', { class: 'cards' }, ...column.cards.map((card) => renderCard(card, left, right)));
  const addCard = el('form', { 'aria-label': `New card in ${column.name}`, onsubmit: (e) => act(async () => {
    e.preventDefault();
    await api('POST', `/api/columns/${column.id}/cards`, { title: e.target.elements.title.value });
    await refresh();
  }) }, el('input', { name: 'title', placeholder: 'Card title', 'aria-label': `Card title for ${column.name}`, maxlength: '200', required: true }), el('button', { type: 'submit', text: 'Add card' }));
  section.append(heading, cards, addCard);
  return section;
}

function renderCard(card, left, right) {
  const item = el('li', { class: 'card', draggable: 'true', 'aria-label': card.title, 'data-card-id': String(card.id) });
  item.addEventListener('dragstart', (e) => e.dataTransfer.setData('text/plain', String(card.id)));
  const move = (column) => act(async () => {
    await api('PATCH', `/api/cards/${card.id}`, { column_id: column.id });
    await refresh();
  });
  const edit = () => {
    const form = el('form', { onsubmit: (e) => act(async () => {
      e.preventDefault();
      await api('PATCH', `/api/cards/${card.id}`, { title: form.elements.title.value, description: form.elements.description.value });
      await refresh();
    }) },
    el('input', { name: 'title', 'aria-label': 'Title', maxlength: '200', required: true }),
    el('textarea', { name: 'description', 'aria-label': 'Description', rows: '3', maxlength: '10000' }),
    el('div', { class: 'actions' }, el('button', { type: 'submit', text: 'Save' }), el('button', { type: 'button', text: 'Cancel', onclick: () => act(refresh) })));
    form.elements.title.value = card.title;
    form.elements.description.value = card.description;
    item.replaceChildren(form);
    form.elements.title.focus();
  };
  item.append(
    el('span', { class: 'title', text: card.title }),
    ...(card.description ? [el('span', { class: 'description', text: card.description })] : []),
    el('div', { class: 'actions' },
      ...(left ? [el('button', { type: 'button', 'aria-label': `Move to ${left.name}`, text: `← ${left.name}`, onclick: () => move(left) })] : []),
      ...(right ? [el('button', { type: 'button', 'aria-label': `Move to ${right.name}`, text: `${right.name} →`, onclick: () => move(right) })] : []),
      el('button', { type: 'button', text: 'Edit', onclick: edit }),
      el('button', { type: 'button', text: 'Delete', onclick: () => act(async () => {
        await api('DELETE', `/api/cards/${card.id}`);
        await refresh();
      }) }),
    ),
  );
  return item;
}

$('sign-in').addEventListener('submit', (e) => {
  e.preventDefault();
  token = $('token').value.trim();
  sessionStorage.setItem(TOKEN_KEY, token);
  $('token').value = '';
  void act(showBoards);
});
$('sign-out').addEventListener('click', () => signOut());
$('new-board').addEventListener('submit', (e) => act(async () => {
  e.preventDefault();
  const board = await api('POST', '/api/boards', { name: e.target.elements.name.value });
  e.target.reset();
  await openBoard(board.id);
}));

if (token) void act(showBoards);
else signOut();
