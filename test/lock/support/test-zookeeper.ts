// The tests start ZooKeeper the way the lock benchmark does.
export { ZooKeeperServer as TestZooKeeper, zookeeperMissing } from '../../../loadtest/locks/zookeeper-server.js';
