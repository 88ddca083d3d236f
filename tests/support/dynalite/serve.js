// dynalite on 127.0.0.1 and a free port (port 0), in memory; prints "listening <port>" once it
// accepts connections. Options as dynalite's own (e.g. --createTableMs 500).
const argv = require('minimist')(process.argv.slice(2))
const server = require('dynalite')(argv)
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => server.close(() => process.exit(0)))
