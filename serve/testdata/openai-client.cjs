// Talks to a goray serve app's OpenAI-compatible front with OpenAI's
// official Node.js client library, as a user would: lists the models,
// asks for a chat completion, a streamed chat completion and a completion,
// and names a model nobody serves. serve's TestOpenAIClient starts the app
// (models "alpha" and "beta": "model <id> says" and the prompt's words)
// and runs this with the library scripts/openai-node.sh installed on
// NODE_PATH. Exits 1 naming each difference.
const { OpenAI, NotFoundError } = require('openai');

const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'not-checked', maxRetries: 0, timeout: 60_000 });
const problems = [];
const check = (what, ok, got) => {
  if (!ok) problems.push(`${what}: got ${JSON.stringify(got)}`);
};

// libraryVersion reads the version of the library in use from its
// package.json (which its exports do not list).
function libraryVersion() {
  const path = require('node:path');
  const fs = require('node:fs');
  const dir = path.dirname(require.resolve('openai'));
  return JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')).version;
}

async function main() {
  const ids = [];
  for await (const m of client.models.list()) {
    check('model object', m.object === 'model' && typeof m.created === 'number', m);
    ids.push(m.id);
  }
  check('models.list', JSON.stringify(ids) === '["alpha","beta"]', ids);

  const chat = await client.chat.completions.create({
    model: 'alpha',
    messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hello there' }],
    temperature: 0.2,
  });
  check('chat completion', chat.object === 'chat.completion' && chat.model === 'alpha' &&
    chat.choices[0].message.role === 'assistant' &&
    chat.choices[0].message.content === 'model alpha says hello there' &&
    chat.choices[0].finish_reason === 'stop' && chat.usage.completion_tokens === 5, chat);

  const stream = await client.chat.completions.create({
    model: 'beta',
    messages: [{ role: 'user', content: 'one two three' }],
    stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let chunks = 0;
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    chunks++;
    check('chunk object', chunk.object === 'chat.completion.chunk' && chunk.model === 'beta', chunk);
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      finish = c.finish_reason ?? finish;
    }
    usage = chunk.usage ?? usage;
  }
  check('streamed chat', text === 'model beta says one two three' && finish === 'stop' && chunks >= 6,
    { text, finish, chunks });
  check('streamed usage', usage !== null && usage.completion_tokens === 6, usage);

  const completion = await client.completions.create({ model: 'alpha', prompt: 'good morning', max_tokens: 3 });
  check('completion', completion.object === 'text_completion' &&
    completion.choices[0].text === 'model alpha says' && completion.choices[0].finish_reason === 'length', completion);

  try {
    await client.chat.completions.create({ model: 'gpt-nope', messages: [{ role: 'user', content: 'hi' }] });
    problems.push('unknown model: no error');
  } catch (e) {
    check('unknown model', e instanceof NotFoundError && e.status === 404 && e.message.includes('gpt-nope') &&
      e.code === 'model_not_found' && e.param === 'model' && e.type === 'invalid_request_error',
    { name: e.constructor.name, status: e.status, message: e.message, code: e.code, param: e.param, type: e.type });
  }

  if (problems.length > 0) {
    console.error('the OpenAI client library sees the front differently:\n' + problems.join('\n'));
    process.exit(1);
  }
  console.log(`openai ${libraryVersion()}: models, chat, streamed chat (${chunks} chunks), completion and an unknown model as expected`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
