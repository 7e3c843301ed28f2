//! The conformance suite (rule B4) on every backend, and the fencing kit (F3) on every
//! shipped recipe.

mod etcd;
mod fencing;
mod jobs_etcd;
mod jobs_memory;
mod jobs_mysql;
mod jobs_postgres;
mod jobs_redis;
mod jobs_sqlite;
mod jobs_zookeeper;
mod memory;
mod mysql;
mod postgres;
mod redis;
mod schedules;
mod sqlite;
mod zookeeper;
