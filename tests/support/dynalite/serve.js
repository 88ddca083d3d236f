// dynalite in memory on 127.0.0.1 and a free port (port 0); prints "listening <port>" once it
// accepts connections. Options as dynalite's own, e.g. --createTableMs 500.
const options = {}
const args = process.argv.slice(2)
for (let i = 0; i < args.length; i += 2) options[args[i].replace(/^--/, '')] = Number(args[i + 1])
const server = require('dynalite')(options)
server.listen(0, '127.0.0.1', () => console.log(`listening ${server.address().port}`))
for (const signal of ['SIGINT', 'SIGTERM']) process.on(signal, () => server.close(() => process.exit(0)))
