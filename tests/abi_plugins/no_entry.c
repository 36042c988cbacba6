/* A shared object that is not a plugin: no attnhost_plugin_entry. */
__attribute__((visibility("default"))) int not_a_plugin_entry(void);
__attribute__((visibility("default"))) int not_a_plugin_entry(void) { return 42; }
