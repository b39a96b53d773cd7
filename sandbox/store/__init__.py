"""Where state is kept: content-addressed snapshot files and working-folder trees."""
