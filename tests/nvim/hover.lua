-- Headless Neovim (0.7+): start gradsight's language server with the built-in LSP client,
-- open the script, wait for diagnostics, hover a layer line, write what it saw as JSON.
-- Inputs from the environment: GS_PYTHON, GS_ROOT, GS_FILE, GS_LINE (0-based), GS_OUT.
local env = vim.env
local out = { diagnostics = {}, hover = nil, error = nil }
local function finish()
  vim.fn.writefile({ vim.fn.json_encode(out) }, env.GS_OUT)
  vim.cmd('qa!')
end

vim.cmd('edit ' .. vim.fn.fnameescape(env.GS_FILE))
local buf = vim.api.nvim_get_current_buf()
local client_id = vim.lsp.start_client({
  name = 'gradsight',
  cmd = { env.GS_PYTHON, '-m', 'gradsight', 'serve' },
  root_dir = env.GS_ROOT,
  init_options = { pollInterval = 0.1 },
  on_exit = function(code) if code ~= 0 then out.error = 'server exited with ' .. code end end,
})
if not client_id then
  out.error = 'could not start the server'
  return finish()
end
vim.lsp.buf_attach_client(buf, client_id)

local ok = vim.wait(60000, function() return #vim.diagnostic.get(buf) > 0 end, 100)
if not ok then
  out.error = 'no diagnostics within 60 s'
  return finish()
end
for _, d in ipairs(vim.diagnostic.get(buf)) do
  table.insert(out.diagnostics, { line = d.lnum, severity = d.severity, message = d.message, source = d.source })
end

local params = {
  textDocument = { uri = vim.uri_from_bufnr(buf) },
  position = { line = tonumber(env.GS_LINE), character = 12 },
}
local results = vim.lsp.buf_request_sync(buf, 'textDocument/hover', params, 20000)
for _, r in pairs(results or {}) do
  if r.result and r.result.contents then
    out.hover = r.result.contents.value or r.result.contents
  end
  if r.err then out.error = vim.inspect(r.err) end
end
-- what a user sees: the hover in Neovim's own floating window
if out.hover then
  local lines = vim.lsp.util.convert_input_to_markdown_lines(out.hover)
  local fbuf = vim.lsp.util.open_floating_preview(lines, 'markdown', {})
  out.float_lines = vim.api.nvim_buf_line_count(fbuf)
end
vim.lsp.stop_client(client_id)
finish()
