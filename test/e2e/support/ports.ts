export { freePort } from '../../../src/dev/free-port.js'
